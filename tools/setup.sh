#!/usr/bin/env bash
# What make test and make demo need besides Go, installed with apt-get where it is missing (as
# root, or through sudo without a password); where it cannot, it stops with the one command
# that would.
#
#   tools/setup.sh test   PostgreSQL, found as a URL in PGLOCK_TEST_DATABASE_URL or
#                         DATABASE_URL or as its server programs (initdb, postgres: the tests
#                         start clusters of their own), its client (psql, pg_dump), PgBouncer,
#                         the de_DE and ja_JP locales (internal/db's tests read server
#                         errors in German and Japanese), Chromium (the console's browser
#                         tests), Patroni and etcd (testdb's Patroni harness),
#                         redis-server (redislock's tests start servers of their own), and
#                         stress-ng (make test-loaded's CPU burners)
#   tools/setup.sh demo   PostgreSQL as a URL or its server programs, unless a Docker engine
#                         answers (the demo then starts a container)
#   tools/setup.sh ha     Patroni and etcd (make ha; the test suite's Patroni harness too)
set -euo pipefail
for_what=${1:-test}

if [ "$(id -u)" = 0 ]; then sudo=; elif sudo -n true 2>/dev/null; then sudo=sudo; else sudo=none; fi
can_apt() { [ "$sudo" != none ] && command -v apt-get >/dev/null 2>&1; }
apt_updated=
apt_install() {
  [ -n "$apt_updated" ] || { $sudo apt-get update -qq; apt_updated=1; }
  $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >/dev/null
}

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
have_client() { command -v psql >/dev/null 2>&1 && command -v pg_dump >/dev/null 2>&1; }
have_pgbouncer() { command -v pgbouncer >/dev/null 2>&1 || [ -x /usr/sbin/pgbouncer ]; }
docker_answers() { command -v docker >/dev/null 2>&1 && docker info >/dev/null 2>&1; }

if [ "$for_what" = ha ]; then
  command -v patroni >/dev/null 2>&1 && command -v etcd >/dev/null 2>&1 && exit 0
  if can_apt; then
    echo "Installing Patroni and etcd with apt-get (patroni etcd-server)" >&2
    apt_install patroni etcd-server
    exit 0
  fi
  echo "Patroni and etcd not found. Install them (Debian, Ubuntu: sudo apt-get install -y patroni etcd-server)" >&2
  exit 1
fi

if [ "$for_what" = demo ]; then
  have_server || docker_answers && exit 0
  if can_apt; then
    echo "PostgreSQL not found: installing it with apt-get (postgresql)" >&2
    apt_install postgresql
    have_server && exit 0
  fi
  echo "PostgreSQL not found. Set DATABASE_URL, start a Docker engine, or install it (Debian, Ubuntu: sudo apt-get install -y postgresql)" >&2
  exit 1
fi

missing=()
have_server || missing+=(postgresql)
have_client || missing+=(postgresql-client)
have_pgbouncer || missing+=(pgbouncer)
command -v chromium >/dev/null 2>&1 || missing+=(chromium) # the console's browser tests
command -v patroni >/dev/null 2>&1 || missing+=(patroni)   # testdb's Patroni harness
command -v etcd >/dev/null 2>&1 || missing+=(etcd-server)
command -v redis-server >/dev/null 2>&1 || missing+=(redis-server) # redislock's tests, make bench
command -v stress-ng >/dev/null 2>&1 || missing+=(stress-ng) # make test-loaded
need_locales=
for locale in de_DE ja_JP; do
  [ -d "/usr/lib/locale/$locale.utf8" ] || need_locales=1
done
# localedef needs the locales' sources, which Debian ships in the locales package.
[ -n "$need_locales" ] && [ ! -d /usr/share/i18n/locales ] && missing+=(locales)
[ ${#missing[@]} = 0 ] && [ -z "$need_locales" ] && exit 0
if [ ${#missing[@]} != 0 ]; then
  if ! can_apt; then
    echo "Missing: ${missing[*]}. Install PostgreSQL's server and client, PgBouncer, Chromium, Patroni, etcd, Redis and stress-ng (Debian: sudo apt-get install -y postgresql postgresql-client pgbouncer locales chromium patroni etcd-server redis-server stress-ng), then run this again" >&2
    exit 1
  fi
  echo "Installing what the tests need with apt-get: ${missing[*]}" >&2
  apt_install "${missing[@]}"
fi
# Generated as directories, not into the locale archive: a server already running has the
# archive mapped and would not see them.
for locale in de_DE ja_JP; do
  [ -d "/usr/lib/locale/$locale.utf8" ] && continue
  if [ "$sudo" = none ] || ! command -v localedef >/dev/null 2>&1; then
    echo "The $locale.UTF-8 locale is missing. Generate it with: sudo localedef --no-archive -i $locale -f UTF-8 $locale.UTF-8" >&2
    exit 1
  fi
  $sudo localedef --no-archive -i "$locale" -f UTF-8 "$locale.UTF-8"
done
