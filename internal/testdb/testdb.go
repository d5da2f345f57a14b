package testdb

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"flag"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/goleak"

	"github.com/pglock/pglock/migrations"
)

// Options choose what a test database holds. A nil *Options means the defaults.
type Options struct {
	// Schema, when set (a plain lower-case identifier), is created and pglock installed into it,
	// and it is the only schema on the search_path of the database's pools. Default: public.
	Schema string

	// Unmigrated leaves the database without pglock's objects. Default: migrated.
	Unmigrated bool
}

// DB is one test's database.
type DB struct {
	// Pool is a pool on the database, closed when the test ends.
	Pool *pgxpool.Pool

	url string
}

// URL returns the database's connection URL, usable by pgx, psql and pg_dump alike.
func (d *DB) URL() string { return d.url }

// NewPool opens another pool on the database (another "instance" of an application), closed
// when the test ends. configure, when not nil, may change the pool's settings first.
func (d *DB) NewPool(t testing.TB, configure func(*pgxpool.Config)) *pgxpool.Pool {
	t.Helper()
	return OpenPool(t, d.url, configure)
}

// OpenPool opens a pool on url (a database's, or a PgBouncer's in front of it), closed when
// the test ends. configure, when not nil, may change the pool's settings first.
func OpenPool(t testing.TB, url string, configure func(*pgxpool.Config)) *pgxpool.Pool {
	t.Helper()
	config, err := pgxpool.ParseConfig(url)
	if err != nil {
		t.Fatalf("testdb: %v", err)
	}
	if configure != nil {
		configure(config)
	}
	pool, err := pgxpool.NewWithConfig(context.Background(), config)
	if err != nil {
		t.Fatalf("testdb: %v", err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// NewRole creates a role named prefix and a suffix that makes it unique in the cluster (roles are
// cluster-wide, shared by parallel tests), and returns its name. When the test ends, the role is
// dropped with whatever it owns and was granted in this database.
func (d *DB) NewRole(t testing.TB, prefix string) string {
	t.Helper()
	name := fmt.Sprintf("%s_%d", prefix, time.Now().UnixNano())
	role := pgx.Identifier{name}.Sanitize()
	if _, err := d.Pool.Exec(context.Background(), "CREATE ROLE "+role); err != nil {
		t.Fatalf("testdb: %v", err)
	}
	t.Cleanup(func() {
		if _, err := d.Pool.Exec(context.Background(), "DROP OWNED BY "+role+"; DROP ROLE "+role); err != nil {
			t.Errorf("testdb: %v", err)
		}
	})
	return name
}

// New creates a database for the calling test, cloned from a template database built once (per
// server, for each set of migration files and Options) so that each clone costs ~70 ms. Each
// test has a database of its own because advisory locks and NOTIFY are scoped to a database: in
// a shared one, parallel tests would block and wake each other. The database is dropped when
// the test ends.
func New(t testing.TB, opts *Options) *DB {
	t.Helper()
	if opts == nil {
		opts = &Options{}
	}
	if opts.Schema != "" && !schemaName.MatchString(opts.Schema) {
		t.Fatalf("testdb: schema %q is not a plain lower-case identifier", opts.Schema)
	}
	return newOn(t, sharedServer(t), opts)
}

// newOn creates a database on srv, dropped at t's cleanup.
func newOn(t testing.TB, srv *liveServer, opts *Options) *DB {
	t.Helper()
	ctx := context.Background()

	template, err := srv.template(ctx, *opts)
	if err != nil {
		t.Fatalf("testdb: %v", err)
	}
	name := fmt.Sprintf("%s%d_%s", testDatabasePrefix, time.Now().Unix(), randomHex(6))
	if _, err := srv.admin.Exec(ctx, "CREATE DATABASE "+name+" TEMPLATE "+template); err != nil {
		t.Fatalf("testdb: create database from %s: %v", template, err)
	}
	t.Cleanup(func() {
		if _, err := srv.admin.Exec(context.Background(), "DROP DATABASE "+name+" WITH (FORCE)"); err != nil {
			t.Errorf("testdb: drop database %s: %v", name, err)
		}
	})
	d := &DB{url: srv.databaseURL(name, opts.Schema)}
	d.Pool = d.NewPool(t, nil)
	return d
}

// testDatabasePrefix starts the name of every test database, followed by its creation time.
const testDatabasePrefix = "pglock_test_"

// Main runs a package's tests; call it from TestMain in every package that uses New. After the
// tests it stops any server it started, and it fails a passing run that leaked goroutines.
func Main(m *testing.M) {
	state.mu.Lock()
	state.mainCalled = true
	state.mu.Unlock()

	if !flag.Parsed() {
		flag.Parse()
	}
	if f := flag.Lookup("test.list"); f != nil && f.Value.String() != "" {
		os.Exit(m.Run()) // listing runs nothing: it needs no database
	}
	// Without PostgreSQL the package's tests cannot mean anything: fail at once, in one line,
	// rather than pass having run nothing.
	if !sourceAvailable() {
		fmt.Fprintf(os.Stderr, "testdb: %v\n", ErrNoServer)
		os.Exit(1)
	}
	// The server is found once, before any test: every test and the examples use it.
	srv, err := connect(context.Background(), nil)
	state.mu.Lock()
	state.srv, state.err = srv, err
	state.mu.Unlock()
	code := 1
	if err == nil {
		var dropExampleDatabase func()
		dropExampleDatabase, err = exampleDatabase(srv)
		if err == nil {
			code = m.Run()
			dropExampleDatabase()
		}
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "testdb: %v\n", err)
	}

	state.mu.Lock()
	if state.srv != nil {
		state.srv.admin.Close()
		if err := state.srv.stop(); err != nil {
			fmt.Fprintf(os.Stderr, "testdb: stop %s: %v\n", state.srv.origin, err)
		}
	}
	state.mu.Unlock()

	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintf(os.Stderr, "testdb: goroutines leaked: %v\n", err)
			code = 1
		}
	}
	os.Exit(code)
}

// exampleDatabase points DATABASE_URL at a migrated database of its own on srv, so that runnable
// examples start as a user's program does, from pgxpool.New(ctx, os.Getenv("DATABASE_URL")).
// drop drops the database and restores the variable (which may have named the server).
func exampleDatabase(srv *liveServer) (drop func(), err error) {
	d, tb, err := newUntested(srv)
	if err != nil {
		return nil, fmt.Errorf("the examples' database: %w", err)
	}
	old, had := os.LookupEnv("DATABASE_URL")
	os.Setenv("DATABASE_URL", d.URL())
	return func() {
		if had {
			os.Setenv("DATABASE_URL", old)
		} else {
			os.Unsetenv("DATABASE_URL")
		}
		tb.cleanup()
	}, nil
}

// liveServer is the server this process found, with a pool on its maintenance database.
type liveServer struct {
	*server
	admin *pgxpool.Pool

	mu        sync.Mutex
	templates map[Options]string
}

var state struct {
	mu         sync.Mutex
	mainCalled bool
	srv        *liveServer
	err        error
}

// sharedServer returns the server Main found. Without one the test fails.
func sharedServer(t testing.TB) *liveServer {
	t.Helper()
	state.mu.Lock()
	defer state.mu.Unlock()
	if !state.mainCalled {
		t.Fatal("testdb: call testdb.Main(m) from this package's TestMain")
	}
	if state.err != nil {
		t.Fatal(state.err)
	}
	return state.srv
}

func connect(ctx context.Context, fallback Fallback) (*liveServer, error) {
	srv, err := findServer(ctx, fallback)
	if err != nil {
		return nil, err
	}
	admin, err := pgxpool.New(ctx, srv.adminURL)
	if err == nil {
		err = admin.Ping(ctx)
	}
	if err != nil {
		srv.stop()
		return nil, fmt.Errorf("testdb: connect to %s: %w", srv.origin, err)
	}
	live := &liveServer{server: srv, admin: admin, templates: map[Options]string{}}
	live.sweep(ctx)
	return live, nil
}

// sweep drops test databases over an hour old: those of test binaries killed before cleanup.
func (s *liveServer) sweep(ctx context.Context) {
	rows, err := s.admin.Query(ctx, "SELECT datname FROM pg_database WHERE datname LIKE $1", testDatabasePrefix+"%")
	if err != nil {
		return
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return
	}
	for _, name := range names {
		created, _, _ := strings.Cut(strings.TrimPrefix(name, testDatabasePrefix), "_")
		if unix, err := strconv.ParseInt(created, 10, 64); err == nil && time.Since(time.Unix(unix, 0)) > time.Hour {
			s.admin.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)")
		}
	}
}

// template returns the name of a template database for opts, building it if no process has.
// The name carries a hash of the migration files, so editing a migration builds a new one.
func (s *liveServer) template(ctx context.Context, opts Options) (string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if name, ok := s.templates[opts]; ok {
		return name, nil
	}
	name, err := templateName(opts)
	if err != nil {
		return "", err
	}

	// Test binaries of several packages run at once; one builds, the others wait and reuse.
	conn, err := s.admin.Acquire(ctx)
	if err != nil {
		return "", err
	}
	defer conn.Release()
	const templateLockKey = 0x70676c6f636b // "pglock"
	if _, err := conn.Exec(ctx, "SELECT pg_advisory_lock($1)", templateLockKey); err != nil {
		return "", err
	}
	defer conn.Exec(ctx, "SELECT pg_advisory_unlock($1)", templateLockKey)

	var exists bool
	if err := conn.QueryRow(ctx, "SELECT EXISTS (SELECT FROM pg_database WHERE datname = $1)", name).Scan(&exists); err != nil {
		return "", err
	}
	if !exists {
		if err := s.buildTemplate(ctx, conn.Conn(), name, opts); err != nil {
			return "", fmt.Errorf("build template %s: %w", name, err)
		}
	}
	s.templates[opts] = name
	return name, nil
}

// buildTemplate builds under a temporary name and renames when done, so a build cut short is
// never cloned.
func (s *liveServer) buildTemplate(ctx context.Context, admin *pgx.Conn, name string, opts Options) error {
	building := name + "_building"
	for _, ddl := range []string{"DROP DATABASE IF EXISTS " + building + " WITH (FORCE)", "CREATE DATABASE " + building} {
		if _, err := admin.Exec(ctx, ddl); err != nil {
			return err
		}
	}
	pool, err := pgxpool.New(ctx, s.databaseURL(building, opts.Schema))
	if err != nil {
		return err
	}
	if opts.Schema != "" {
		_, err = pool.Exec(ctx, "CREATE SCHEMA "+pgx.Identifier{opts.Schema}.Sanitize())
	}
	if err == nil && !opts.Unmigrated {
		err = migrations.Up(ctx, pool)
	}
	pool.Close()
	if err != nil {
		return err
	}
	if _, err := admin.Exec(ctx, "ALTER DATABASE "+building+" RENAME TO "+name); err != nil {
		return err
	}
	_, err = admin.Exec(ctx, "ALTER DATABASE "+name+" IS_TEMPLATE true") // clonable by any role
	return err
}

func templateName(opts Options) (string, error) {
	h := sha256.New()
	fmt.Fprintf(h, "schema=%q unmigrated=%t\n", opts.Schema, opts.Unmigrated)
	err := fs.WalkDir(migrations.FS, ".", func(path string, entry fs.DirEntry, err error) error {
		if err != nil || entry.IsDir() {
			return err
		}
		content, err := fs.ReadFile(migrations.FS, path)
		fmt.Fprintf(h, "%s %d\n%s", path, len(content), content)
		return err
	})
	return "pglock_tmpl_" + hex.EncodeToString(h.Sum(nil))[:16], err
}

// databaseURL points the server's admin URL (URL or keyword=value form) at another database,
// with schema first on the search_path when set.
func (s *liveServer) databaseURL(database, schema string) string {
	option := ""
	if schema != "" {
		option = "-c search_path=" + schema
	}
	if u, err := url.Parse(s.adminURL); err == nil && u.Scheme != "" {
		u.Path = "/" + database
		q := u.Query()
		q.Del("dbname") // it would win over the path
		if option != "" {
			q.Set("options", strings.TrimSpace(q.Get("options")+" "+option))
		}
		u.RawQuery = strings.ReplaceAll(q.Encode(), "+", "%20") // libpq and pgx read '+' as itself
		return u.String()
	}
	dsn := s.adminURL + " dbname=" + database
	if option != "" {
		config, err := pgx.ParseConfig(s.adminURL)
		if err == nil {
			option = strings.TrimSpace(config.RuntimeParams["options"] + " " + option)
		}
		dsn += " options='" + strings.ReplaceAll(option, "'", `\'`) + "'"
	}
	return dsn
}

// schemaName matches the schema names Options accepts: plain lower-case identifiers, which
// need no quoting in a search_path.
var schemaName = regexp.MustCompile(`^[a-z_][a-z0-9_]*$`)

func randomHex(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return hex.EncodeToString(b)
}
