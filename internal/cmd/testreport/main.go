// Command testreport reads the events of go test -json (gotestsum's --jsonfile) and prints the
// tests that failed, by package, each with what it said: its own lines (t.Error, t.Fatal,
// require's messages, a race report or a panic), without the logs of the code under test that
// go test interleaves with them. make test runs it when tests fail, so that the last lines of a
// failed run name each failed test and why, however long the run's output was above them.
//
// Usage: testreport events.json
package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
)

// event is one line of go test -json (cmd/test2json).
type event struct {
	Action  string
	Package string
	Test    string
	Elapsed float64
	Output  string
}

// maxLines bounds what one test's report shows: its first lines say why it failed.
const maxLines = 30

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: testreport events.json")
		os.Exit(2)
	}
	f, err := os.Open(os.Args[1])
	if err != nil {
		fmt.Fprintln(os.Stderr, "testreport:", err)
		os.Exit(2)
	}
	defer f.Close()
	if err := report(os.Stdout, f); err != nil {
		fmt.Fprintln(os.Stderr, "testreport:", err)
		os.Exit(2)
	}
}

type failure struct {
	pkg, test string
	elapsed   float64
	said      []string
}

func report(w io.Writer, r io.Reader) error {
	output := map[[2]string][]string{}  // by package and test ("" for the package's own)
	everything := map[string][]string{} // by package, whichever test wrote it
	var failed []failure
	scanner := bufio.NewScanner(r)
	scanner.Buffer(make([]byte, 1<<20), 1<<26)
	for scanner.Scan() {
		var e event
		if json.Unmarshal(scanner.Bytes(), &e) != nil {
			continue // gotestsum writes a build's errors as they came, outside the events
		}
		key := [2]string{e.Package, e.Test}
		switch e.Action {
		case "output":
			line := strings.TrimRight(e.Output, "\n")
			output[key] = append(output[key], line)
			everything[e.Package] = append(everything[e.Package], line)
		case "fail":
			lines := said(output[key], false)
			if e.Test == "" {
				// test2json gives what comes after the tests (the -timeout's panic, a TestMain's
				// failure) to whichever test wrote last: the package's report is its panics.
				lines = said(everything[e.Package], true)
			}
			failed = append(failed, failure{pkg: e.Package, test: e.Test, elapsed: e.Elapsed, said: lines})
		}
		if e.Action == "pass" || e.Action == "skip" {
			delete(output, key)
		}
	}
	if err := scanner.Err(); err != nil {
		return err
	}
	// A parent fails with its failed subtests, and a package with its failed tests: report the
	// innermost, and a package only when no test of it failed (a build error, a panic in
	// TestMain, the -timeout's panic).
	hasFailedChild := map[[2]string]bool{}
	for _, f := range failed {
		if f.test != "" {
			hasFailedChild[[2]string{f.pkg, ""}] = true
			for parent, _, ok := strings.Cut(f.test, "/"); ok; parent, _, ok = cutLast(parent) {
				hasFailedChild[[2]string{f.pkg, parent}] = true
			}
		}
	}
	var shown []failure
	for _, f := range failed {
		if !hasFailedChild[[2]string{f.pkg, f.test}] {
			shown = append(shown, f)
		}
	}
	if len(shown) == 0 {
		fmt.Fprintln(w, "testreport: no failed test in the events (the failure came before the tests: see above)")
		return nil
	}
	sort.SliceStable(shown, func(i, j int) bool { return shown[i].pkg < shown[j].pkg })
	fmt.Fprintf(w, "\n=== %d failed:\n", len(shown))
	for _, f := range shown {
		name := f.test
		if name == "" {
			name = "(the package)"
		}
		fmt.Fprintf(w, "\n--- FAIL %s %s (%.2fs)\n", f.pkg, name, f.elapsed)
		for _, line := range f.said {
			fmt.Fprintln(w, line)
		}
	}
	fmt.Fprintln(w)
	for _, f := range shown {
		fmt.Fprintf(w, "FAIL %s %s\n", f.pkg, f.test)
	}
	return nil
}

// cutLast is strings.Cut at the last "/": the test's parent.
func cutLast(s string) (before, after string, found bool) {
	i := strings.LastIndex(s, "/")
	if i < 0 {
		return s, "", false
	}
	return s[:i], s[i+1:], true
}

// said keeps a test's own lines: go test indents what a test logs (four spaces and file:line,
// continuation lines deeper), while the code under test logs at the left margin; a panic, a race
// report and a timeout also start at the margin and are kept whole, up to maxLines. With
// reportsOnly, only those are kept.
func said(lines []string, reportsOnly bool) []string {
	var kept []string
	inReport := false
	for _, line := range lines {
		switch {
		case strings.HasPrefix(line, "=== ") || strings.HasPrefix(line, "--- "):
			inReport = false
			continue // go test's own markers: the report names the test
		case strings.HasPrefix(line, "panic:"), strings.HasPrefix(line, "WARNING: DATA RACE"),
			strings.HasPrefix(line, "fatal error:"):
			inReport = true
		case inReport:
		case reportsOnly:
			continue
		case strings.HasPrefix(line, "    "), strings.HasPrefix(line, "\t"):
		default:
			continue
		}
		if len(kept) == maxLines {
			return append(kept, "    … (the rest is above, in the run's output)")
		}
		kept = append(kept, line)
	}
	return kept
}
