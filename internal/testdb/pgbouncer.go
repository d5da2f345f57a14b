package testdb

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/jackc/pgx/v5"
)

// ThroughPgBouncer starts a PgBouncer in transaction pooling mode on a free loopback port, in
// front of the test's database, and returns the URL that reaches the database through it, with
// params (such as "default_query_exec_mode=exec") added to its query. PgBouncer stops when the
// test ends. Without a pgbouncer binary the test is skipped with one line, except under
// CI=true, where that fails it.
func (d *DB) ThroughPgBouncer(t testing.TB, params string) string {
	t.Helper()
	bin, err := findPgBouncer()
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("testdb: %v", err)
		}
		t.Skipf("testdb: %v", err)
	}
	server, err := pgx.ParseConfig(d.url)
	if err != nil {
		t.Fatalf("testdb: %v", err)
	}
	dir, o, err := ownedDir("pglock-pgbouncer-") // PgBouncer, too, refuses to run as root
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	port, err := FreePort()
	if err != nil {
		t.Fatalf("testdb: %v", err)
	}
	// auth_type any: PgBouncer logs in to the server as the one user the database line names,
	// whoever the client says it is, so the test needs no password file.
	login := fmt.Sprintf("host=%s port=%d user=%s", server.Host, server.Port, server.User)
	if server.Password != "" {
		login += " password=" + server.Password
	}
	config := fmt.Sprintf(`[databases]
* = %s

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = %d
unix_socket_dir =
auth_type = any
pool_mode = transaction
max_client_conn = 1000
default_pool_size = 20
ignore_startup_parameters = extra_float_digits,options
logfile = %s
`, login, port, filepath.Join(dir, "pgbouncer.log"))
	ini := filepath.Join(dir, "pgbouncer.ini")
	if err := os.WriteFile(ini, []byte(config), 0o644); err != nil {
		t.Fatalf("testdb: %v", err)
	}
	cmd := o.command(context.Background(), dir, bin, ini)
	exited, err := StartChild(cmd)
	if err != nil {
		t.Fatalf("testdb: start pgbouncer: %v", err)
	}
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGTERM) // immediate shutdown: clients are the test's, and done
		<-exited
	})

	through := fmt.Sprintf("postgres://%s@127.0.0.1:%d/%s?sslmode=disable", url.User(server.User).String(), port, server.Database)
	if params != "" {
		through += "&" + strings.TrimPrefix(params, "&")
	}
	if err := waitForServer(context.Background(), through, exited); err != nil {
		t.Fatalf("testdb: pgbouncer on port %d: %v; its log:\n%s", port, err, logExcerpt(filepath.Join(dir, "pgbouncer.log")))
	}
	return through
}

// findPgBouncer looks on PATH, then where Debian installs it.
func findPgBouncer() (string, error) {
	if bin, err := exec.LookPath("pgbouncer"); err == nil {
		return bin, nil
	}
	if _, err := os.Stat("/usr/sbin/pgbouncer"); err == nil {
		return "/usr/sbin/pgbouncer", nil
	}
	return "", fmt.Errorf("no pgbouncer binary (Debian: apt-get install pgbouncer)")
}
