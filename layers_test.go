package pglock_test

import (
	"errors"
	"go/ast"
	"go/parser"
	"go/token"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// The module's packages in layers (docs/architecture.md), each importing only those below it:
//
//   - programs: package main, under cmd/ or internal/cmd/;
//   - the operator layer (internal/ops, console) and the test harnesses: named in above, they
//     may import anything but programs;
//   - the public packages: the root and its subpackages, importing the root, each other, and
//     the machinery; never a harness;
//   - the machinery: the rest of internal/, below the public packages, importing the root's
//     vocabulary and other machinery only.
func TestPackagesImportOnlyTheLayersBelowThem(t *testing.T) {
	t.Parallel()
	const module = "github.com/pglock/pglock"
	above := map[string]string{ // what lives under internal/ above the public packages, and why
		module + "/internal/ops":         "the operator layer: what pglockctl and the console read and do",
		module + "/console":              "the operator layer's web console, public to be mounted",
		module + "/internal/testdb":      "test harness: databases, clusters, PgBouncer, Patroni",
		module + "/internal/testredis":   "test harness: redis-server",
		module + "/internal/consoletest": "test harness: a seeded console",
		module + "/internal/locktest":    "test harness: the Locker conformance suite",
		module + "/internal/benchkit":    "test harness: benchmarks against their baselines",
	}
	out, err := exec.Command("go", "list", "-f", "{{.ImportPath}}|{{.Name}}|{{join .Imports \",\"}}", "./...").Output()
	var exitErr *exec.ExitError
	if errors.As(err, &exitErr) {
		t.Fatalf("go list: %v: %s", err, exitErr.Stderr)
	}
	require.NoError(t, err)
	layer := func(path, name string) string {
		switch {
		case name == "main":
			return "program"
		case above[path] != "":
			return "above"
		case strings.HasPrefix(path, module+"/internal/"):
			return "machinery"
		default:
			return "public"
		}
	}
	names := map[string]string{}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	for _, line := range lines {
		fields := strings.SplitN(line, "|", 3)
		names[fields[0]] = fields[1]
	}
	for _, line := range lines {
		fields := strings.SplitN(line, "|", 3)
		path, name := fields[0], fields[1]
		from := layer(path, name)
		if from == "program" {
			require.True(t, strings.HasPrefix(path, module+"/cmd/") || strings.HasPrefix(path, module+"/internal/cmd/"),
				"%s is a program: it lives under cmd/ or internal/cmd/, not among the packages", path)
		}
		for _, imported := range strings.Split(fields[2], ",") {
			importedName, ours := names[imported]
			if !ours {
				continue // the standard library, or another module
			}
			to := layer(imported, importedName)
			switch {
			case to == "program":
				t.Errorf("%s imports the program %s", path, imported)
			case from == "public" && to == "above":
				t.Errorf("%s, a public package, imports %s (%s)", path, imported, above[imported])
			case from == "machinery" && to != "machinery" && imported != module:
				t.Errorf("%s, machinery, imports %s (%s): machinery imports the root's vocabulary and other machinery only", path, imported, to)
			}
		}
	}
}

// Every read and action of pglockctl and the console on the primitives goes through internal/ops,
// the one operator layer: neither uses a function of the primitives' packages (nor
// internal/db's queries) itself. Their types and constants are theirs to name; pglockctl's
// migrate commands call package migrations, the installer, directly.
func TestOperatorsReadAndActThroughOneLayer(t *testing.T) {
	t.Parallel()
	const module = "github.com/pglock/pglock"
	functions := map[string]map[string]bool{} // by import path: the package's exported functions
	for _, dir := range []string{"advisory", "cron", "jobs", "leader", "ratelimit", "tablelock"} {
		functions[module+"/"+dir] = exportedFunctions(t, dir)
	}
	functions[module+"/internal/db"] = map[string]bool{"New": true, "Translating": true}
	for _, dir := range []string{"console", "cmd/pglockctl"} {
		for _, file := range goFiles(t, dir) {
			imported := map[string]string{} // the file's name for a package: its path
			for _, spec := range file.ast.Imports {
				path := strings.Trim(spec.Path.Value, `"`)
				name := path[strings.LastIndex(path, "/")+1:]
				if spec.Name != nil {
					name = spec.Name.Name
				}
				imported[name] = path
			}
			// A call, or a function passed as a value: either way the lower package acts.
			ast.Inspect(file.ast, func(n ast.Node) bool {
				if sel, ok := n.(*ast.SelectorExpr); ok {
					if pkg, ok := sel.X.(*ast.Ident); ok && functions[imported[pkg.Name]][sel.Sel.Name] {
						t.Errorf("%s: uses %s.%s: pglockctl and the console read and act through internal/ops", file.name, pkg.Name, sel.Sel.Name)
					}
				}
				return true
			})
		}
	}
}

type goFile struct {
	name string
	ast  *ast.File
}

// goFiles parses dir's non-test Go files.
func goFiles(t *testing.T, dir string) []goFile {
	t.Helper()
	paths, err := filepath.Glob(filepath.Join(dir, "*.go"))
	require.NoError(t, err)
	var files []goFile
	for _, path := range paths {
		if strings.HasSuffix(path, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(token.NewFileSet(), path, nil, 0)
		require.NoError(t, err)
		files = append(files, goFile{path, f})
	}
	require.NotEmpty(t, files, dir)
	return files
}

// exportedFunctions names the exported functions (not methods) of the package in dir.
func exportedFunctions(t *testing.T, dir string) map[string]bool {
	t.Helper()
	names := map[string]bool{}
	for _, file := range goFiles(t, dir) {
		for _, decl := range file.ast.Decls {
			if fn, ok := decl.(*ast.FuncDecl); ok && fn.Recv == nil && fn.Name.IsExported() {
				names[fn.Name.Name] = true
			}
		}
	}
	return names
}
