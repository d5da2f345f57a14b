package testdb

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// server is a PostgreSQL server the tests may create databases on.
type server struct {
	adminURL string // a superuser's URL to a maintenance database
	origin   string // where it came from, for messages
	stop     func() error
}

// ErrNoServer means no way to reach or start PostgreSQL was found.
var ErrNoServer = errors.New("no PostgreSQL: set PGLOCK_TEST_DATABASE_URL to a superuser's URL, " +
	"or install PostgreSQL's server (initdb and postgres on PATH or in the usual directories; " +
	"make test installs it with apt-get where it can)")

// A Fallback starts a PostgreSQL server where findServer finds none: adminURL is a superuser's
// URL to a maintenance database, and stop ends the server. It returns an error matching
// ErrNoServer when it has nothing to start one with.
type Fallback func(ctx context.Context) (adminURL string, stop func() error, err error)

// findServer tries, in order: the URL in PGLOCK_TEST_DATABASE_URL or DATABASE_URL, a throwaway
// cluster from local PostgreSQL binaries, and fallback when not nil.
func findServer(ctx context.Context, fallback Fallback) (*server, error) {
	for _, env := range []string{"PGLOCK_TEST_DATABASE_URL", "DATABASE_URL"} {
		if url := os.Getenv(env); url != "" {
			return &server{adminURL: url, origin: env, stop: func() error { return nil }}, nil
		}
	}
	var errs []error
	if bin, err := findPostgresBin(); err == nil {
		srv, err := startLocalCluster(ctx, bin)
		if err == nil {
			return srv, nil
		}
		errs = append(errs, err)
	}
	if fallback != nil {
		url, stop, err := fallback(ctx)
		if err == nil {
			return &server{adminURL: url, origin: "fallback", stop: stop}, nil
		}
		if !errors.Is(err, ErrNoServer) {
			errs = append(errs, err)
		}
	}
	if len(errs) == 0 {
		return nil, ErrNoServer
	}
	return nil, errors.Join(errs...)
}

// sourceAvailable reports whether findServer has anywhere to look without a fallback, starting
// nothing.
func sourceAvailable() bool {
	if os.Getenv("PGLOCK_TEST_DATABASE_URL") != "" || os.Getenv("DATABASE_URL") != "" {
		return true
	}
	_, err := findPostgresBin()
	return err == nil
}

// findPostgresBin returns a directory holding initdb and postgres: from PATH, else the newest
// version under the usual install directories.
func findPostgresBin() (string, error) {
	if initdb, err := exec.LookPath("initdb"); err == nil {
		// Where a link on PATH leads: the directory that holds PostgreSQL's other programs
		// (pg_basebackup, pg_ctl) too.
		if target, err := filepath.EvalSymlinks(initdb); err == nil {
			initdb = target
		}
		dir := filepath.Dir(initdb)
		if _, err := os.Stat(filepath.Join(dir, "postgres")); err == nil {
			return dir, nil
		}
	}
	var candidates []string
	for _, pattern := range []string{
		"/usr/lib/postgresql/*/bin",          // Debian, Ubuntu
		"/usr/pgsql-*/bin",                   // RHEL, Fedora (PGDG)
		"/usr/local/pgsql/bin",               // built from source
		"/opt/homebrew/opt/postgresql@*/bin", // Homebrew on Apple silicon
		"/usr/local/opt/postgresql@*/bin",    // Homebrew on Intel
	} {
		matches, _ := filepath.Glob(pattern)
		candidates = append(candidates, matches...)
	}
	sort.Slice(candidates, func(i, j int) bool { return majorVersion(candidates[i]) > majorVersion(candidates[j]) })
	for _, dir := range candidates {
		if _, err := os.Stat(filepath.Join(dir, "initdb")); err == nil {
			return dir, nil
		}
	}
	return "", errors.New("testdb: no initdb found")
}

// majorVersion reads the first number in a path such as /usr/lib/postgresql/15/bin.
func majorVersion(path string) int {
	digits := strings.FieldsFunc(path, func(r rune) bool { return r < '0' || r > '9' })
	if len(digits) == 0 {
		return 0
	}
	n, _ := strconv.Atoi(digits[0])
	return n
}

// startLocalCluster starts a Cluster of the tests' own from the binaries in bin.
func startLocalCluster(ctx context.Context, bin string) (*server, error) {
	c, err := startCluster(ctx, bin)
	if err != nil {
		return nil, fmt.Errorf("testdb: local cluster from %s: %w", bin, err)
	}
	return &server{adminURL: c.URL(), origin: "local cluster from " + bin, stop: c.Remove}, nil
}

// FreePort returns a loopback port free when it was asked, for a server to be started on. It is
// drawn below the ephemeral range (ip_local_port_range), which the kernel gives the local end of
// outgoing connections: a port from it can be taken by one of those before the server binds it
// (a Patroni REST API failed so, "Address already in use").
func FreePort() (int, error) {
	low := 32768 // Linux's default ephemeral range starts here
	if r, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range"); err == nil {
		if fields := strings.Fields(string(r)); len(fields) == 2 {
			if n, err := strconv.Atoi(fields[0]); err == nil && n > 12000 {
				low = n
			}
		}
	}
	var lastErr error
	for range 100 {
		port := 10000 + rand.IntN(low-10000)
		l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port))
		if err != nil {
			lastErr = err
			continue
		}
		l.Close()
		return port, nil
	}
	return 0, fmt.Errorf("testdb: no free loopback port below %d: %w", low, lastErr)
}

func waitForServer(ctx context.Context, url string, exited <-chan struct{}) error {
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	for {
		conn, err := pgx.Connect(ctx, url)
		if err == nil {
			return conn.Close(ctx)
		}
		select {
		case <-exited:
			return errors.New("postgres exited during startup")
		case <-ctx.Done():
			return fmt.Errorf("postgres did not accept connections: %w", err)
		case <-time.After(50 * time.Millisecond):
		}
	}
}
