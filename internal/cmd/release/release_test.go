package main

import (
	"go/parser"
	"go/token"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pglock/pglock"
	"github.com/pglock/pglock/internal/testdb"
)

func TestMain(m *testing.M) { testdb.Main(m) }

// A user meets the release as its tags will make it: in a module of their own, outside the
// repository and its go.work, they go get each published module at the next version from a
// module proxy, build a program that uses every public package and adapter, run it against
// PostgreSQL, and go install pglockctl. The proxy holds the published modules alone: one that
// needed an unpublished module, or a replace, would fail here. (One importing another module's
// internals would not, the proxy's root being this very tree:
// TestNoModuleImportsAnotherModulesInternals is the test of that.)
func TestPublishedModulesCanBeFetched(t *testing.T) {
	t.Parallel()
	repo, err := findRepo()
	require.NoError(t, err)
	next, err := nextVersion(repo)
	require.NoError(t, err)
	db := testdb.New(t, nil)

	scratch := t.TempDir()
	proxyDir, cacheDir, user := filepath.Join(scratch, "proxy"), filepath.Join(scratch, "cache"), filepath.Join(scratch, "user")
	require.NoError(t, writeProxy(repo, proxyDir, published, next))
	env, err := fetching(proxyDir, cacheDir)
	require.NoError(t, err)
	require.NoError(t, os.MkdirAll(user, 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(user, "go.mod"), []byte("module example.com/user\n\ngo 1.25.11\n"), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(user, "main.go"), []byte(userProgram), 0o644))

	goGet := []string{"get"}
	for _, dir := range published {
		goGet = append(goGet, strings.TrimSuffix(path.Join(rootPath, dir), "/.")+"@"+next)
	}
	for _, step := range [][]string{
		goGet,
		{"mod", "tidy"},
		{"build", "-mod=readonly", "-trimpath", "-o", "program", "."},
		{"vet", "-mod=readonly", "-trimpath", "."},
		{"list", "-mod=readonly", "-m", "all"}, // every module of the graph is served: none unpublished
	} {
		start := time.Now()
		stdout, stderr, err := goCommand(user, env, step...)
		require.NoError(t, err, "go %s:\n%s%s", strings.Join(step, " "), stdout, stderr)
		t.Logf("go %s (%s)\n%s%s", strings.Join(step, " "), time.Since(start).Round(time.Millisecond), stdout, stderr)
	}
	run := exec.Command(filepath.Join(user, "program"), db.URL())
	out, err := run.CombinedOutput()
	require.NoError(t, err, "%s", out)
	require.Equal(t, strings.Join([]string{
		"migrations: at the latest version, no drift",
		"tablelock, otelpglock, gocronlock: a gocron job locked and unlocked",
		"memlock: held",
		"lease: a heartbeat every 1s",
		"redislock: a nil client refused: true",
	}, "\n")+"\n", string(out))
	t.Logf("the program said:\n%s", out)

	_, stderr, err := goCommand(user, append(env, "GOBIN="+filepath.Join(scratch, "bin")), "install", "-trimpath", rootPath+"/cmd/pglockctl@"+next)
	require.NoError(t, err, "go install pglockctl:\n%s", stderr)
	version, err := exec.Command(filepath.Join(scratch, "bin", "pglockctl"), "version").CombinedOutput()
	require.NoError(t, err, "%s", version)
	// The tree's version.go: the release sets it to the next version (release tags checks).
	require.True(t, strings.HasPrefix(string(version), "pglockctl "+pglock.Version+" "), "%s", version)
	t.Logf("go install %s/cmd/pglockctl@%s; pglockctl version: %s", rootPath, next, version)
}

// userProgram uses every published module: the root's packages against PostgreSQL, and each
// adapter.
const userProgram = `package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pglock/pglock"
	"github.com/pglock/pglock/gocronlock"
	"github.com/pglock/pglock/lease"
	"github.com/pglock/pglock/memlock"
	"github.com/pglock/pglock/migrations"
	"github.com/pglock/pglock/otelpglock"
	"github.com/pglock/pglock/redislock"
	"github.com/pglock/pglock/tablelock"
)

func main() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Args[1])
	check(err)
	defer pool.Close()
	check(migrations.Up(ctx, pool))
	status, err := migrations.Version(ctx, pool)
	check(err)
	if status.Version == migrations.Latest() && len(status.Drift) == 0 {
		fmt.Println("migrations: at the latest version, no drift")
	}

	observer, err := otelpglock.New(nil)
	check(err)
	locker, err := tablelock.New(pool, &tablelock.Config{Observer: observer})
	check(err)
	defer locker.Close(ctx)
	jobs, err := gocronlock.NewLocker(locker, 100*time.Millisecond, nil)
	check(err)
	lock, err := jobs.Lock(ctx, "nightly-report")
	check(err)
	check(lock.Unlock(ctx))
	fmt.Println("tablelock, otelpglock, gocronlock: a gocron job locked and unlocked")

	mem, err := memlock.New(nil)
	check(err)
	defer mem.Close()
	check(mem.WithLock(ctx, "in-memory", func(context.Context) error {
		fmt.Println("memlock: held")
		return nil
	}))

	timing, err := lease.NewTiming(3*time.Second, 0, 0)
	check(err)
	fmt.Println("lease: a heartbeat every", timing.Heartbeat)

	_, err = redislock.New(nil, nil)
	fmt.Println("redislock: a nil client refused:", errors.Is(err, pglock.ErrInvalidArgument))
}

func check(err error) {
	if err != nil {
		panic(err)
	}
}
`

// No module's code reaches into another module's internal/ packages: a published module built
// against a root module whose internals changed (minimal version selection may pick a newer
// one) would break. Tests may use the root's harness (internal/testdb): an importer's go command
// never builds them (since Go 1.16, its "all" holds the tests of its own packages only). The
// modules under internal/ are exempt: Go lets nothing outside this repository
// import them, they are never tagged, and go.work builds them with this very tree; so is bench,
// the benchmarks' program, which builds with its replace directives against this tree.
func TestNoModuleImportsAnotherModulesInternals(t *testing.T) {
	t.Parallel()
	repo, err := findRepo()
	require.NoError(t, err)
	cmd := exec.Command("git", "ls-files", "--cached", "--others", "--exclude-standard")
	cmd.Dir = repo
	out, err := cmd.Output()
	require.NoError(t, err)
	files := strings.Split(strings.TrimSpace(string(out)), "\n")

	modules := map[string]string{} // by directory: the module's path
	for _, name := range files {
		if path.Base(name) == "go.mod" {
			m, err := readModule(repo, path.Dir(name))
			require.NoError(t, err)
			modules[m.dir] = m.path()
		}
	}
	require.Subset(t, keys(modules), published)
	owner := func(dir string) string { // the directory of the module holding dir
		for ; ; dir = path.Dir(dir) {
			if _, ok := modules[dir]; ok || dir == "." {
				return dir
			}
		}
	}
	ownerOfImport := func(importPath string) (dir string, rest string) { // the module an import path is in
		best := ""
		for d, p := range modules {
			if (importPath == p || strings.HasPrefix(importPath, p+"/")) && len(p) > len(modules[best]) {
				best = d
			}
		}
		return best, strings.TrimPrefix(strings.TrimPrefix(importPath, modules[best]), "/")
	}
	checked := 0
	for _, name := range files {
		if !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") || strings.Contains(name, "/testdata/") {
			continue
		}
		from := owner(path.Dir(name))
		if strings.HasPrefix(from, "internal/") || from == "bench" {
			continue
		}
		file, err := parser.ParseFile(token.NewFileSet(), filepath.Join(repo, name), nil, parser.ImportsOnly)
		require.NoError(t, err)
		checked++
		for _, spec := range file.Imports {
			imported := strings.Trim(spec.Path.Value, `"`)
			if !strings.HasPrefix(imported, rootPath) {
				continue
			}
			to, rest := ownerOfImport(imported)
			if to != from && slices.Contains(strings.Split(rest, "/"), "internal") {
				t.Errorf("%s (module %s) imports %s, an internal package of module %s", name, modules[from], imported, modules[to])
			}
		}
	}
	require.Greater(t, checked, 100, "the files checked")
}

func keys(m map[string]string) []string {
	var ks []string
	for k := range m {
		ks = append(ks, k)
	}
	return ks
}
