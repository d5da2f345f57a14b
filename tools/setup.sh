#!/usr/bin/env bash
# What make test and make demo need besides Go: PostgreSQL, found as a URL in
# PGLOCK_TEST_DATABASE_URL or DATABASE_URL or as its server programs (initdb, postgres, from
# which they start clusters of their own), its client (psql, pg_dump), PgBouncer, and the de_DE and ja_JP
# locales (internal/db's tests read server errors in German and Japanese). What is missing it
# installs with apt-get (as root, or through sudo without a password); where it cannot, it stops
# with the one command that would.
set -euo pipefail

if [ "$(id -u)" = 0 ]; then sudo=; elif sudo -n true 2>/dev/null; then sudo=sudo; else sudo=none; fi

# Generated as directories, not into the locale archive: a server already running has the
# archive mapped and would not see them.
for locale in de_DE ja_JP; do
  [ -d "/usr/lib/locale/$locale.utf8" ] && continue
  if [ "$sudo" = none ] || ! command -v localedef >/dev/null 2>&1; then
    echo "The $locale.UTF-8 locale is missing. Generate it with: sudo localedef --no-archive -i $locale -f UTF-8 $locale.UTF-8" >&2
    exit 1
  fi
  if [ ! -d /usr/share/i18n/locales ] && command -v apt-get >/dev/null 2>&1; then
    $sudo apt-get update -qq
    $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq locales >/dev/null
  fi
  $sudo localedef --no-archive -i "$locale" -f UTF-8 "$locale.UTF-8"
done

have_server() {
  [ -n "${PGLOCK_TEST_DATABASE_URL:-}${DATABASE_URL:-}" ] && return 0
  command -v initdb >/dev/null 2>&1 && return 0
  local dir
  for dir in /usr/lib/postgresql/*/bin /usr/pgsql-*/bin /usr/local/pgsql/bin \
             /opt/homebrew/opt/postgresql@*/bin /usr/local/opt/postgresql@*/bin; do
    [ -x "$dir/initdb" ] && [ -x "$dir/postgres" ] && return 0
  done
  return 1
}
have_pgbouncer() { command -v pgbouncer >/dev/null 2>&1 || [ -x /usr/sbin/pgbouncer ]; }
have_all() { have_server && have_pgbouncer && command -v psql >/dev/null 2>&1 && command -v pg_dump >/dev/null 2>&1; }
have_all && exit 0

if command -v apt-get >/dev/null 2>&1; then
  if [ "$sudo" != none ]; then
    echo "PostgreSQL or PgBouncer not found: installing them with apt-get (postgresql, postgresql-client, pgbouncer)" >&2
    $sudo apt-get update -qq
    $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql postgresql-client pgbouncer >/dev/null
    have_all && exit 0
  fi
  echo "PostgreSQL not found. Install it with: sudo apt-get install -y postgresql postgresql-client pgbouncer" >&2
else
  echo "PostgreSQL not found. Install its server and client (initdb, postgres, psql, pg_dump), or set PGLOCK_TEST_DATABASE_URL to a superuser's URL" >&2
fi
exit 1
