package main

import (
	"bytes"
	"errors"
	"fmt"
	"go/version"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/pglock/pglock"
)

// fetching is a go command's environment that resolves modules the way a user's does once the
// release is tagged: outside the workspace, the published modules at the next version from the
// proxy in proxyDir, the rest from the module cache already here and then the usual proxy. Its
// module cache, cacheDir, is its own: the shared one must never keep a zip of a version that
// the next change to the tree makes anew.
func fetching(proxyDir, cacheDir string) ([]string, error) {
	upstream, err := goEnv("GOPROXY")
	if err != nil {
		return nil, err
	}
	shared, err := goEnv("GOMODCACHE")
	if err != nil {
		return nil, err
	}
	env := []string{}
	for _, kv := range os.Environ() {
		switch strings.SplitN(kv, "=", 2)[0] {
		case "GOENV", "GOWORK", "GOPROXY", "GOMODCACHE", "GOFLAGS", "GONOSUMDB", "GOPRIVATE", "GONOPROXY":
		default:
			env = append(env, kv)
		}
	}
	return append(env,
		"GOENV=off", // settings saved with go env -w (a GOPRIVATE, say) must not change what is fetched
		"GOWORK=off",
		"GOPROXY="+fileURL(proxyDir)+","+fileURL(filepath.Join(shared, "cache", "download"))+","+upstream,
		"GOMODCACHE="+cacheDir,
		"GOFLAGS=-modcacherw",
		// The checksum database has never seen the next version: its hashes are the proxy's.
		"GONOSUMDB="+rootPath,
	), nil
}

func fileURL(dir string) string { return "file://" + filepath.ToSlash(dir) }

func goEnv(name string) (string, error) {
	out, err := exec.Command("go", "env", name).Output()
	return strings.TrimSpace(string(out)), err
}

// check checks each module of go.work, as a user's go command will meet it after the release:
// no replace directive (go.work stands in for unreleased versions), every requirement on a
// module of ours at the next version (and a published module's only on published ones),
// go.mod and go.sum tidy against the release's proxy (but for go.sum's lines for our own
// modules, which change with every commit until the tag), and a go line no newer than its
// requirements need. It writes a line per module.
func check(repo string, w io.Writer) error {
	return eachModule(repo, func(scratch string, env []string, m gomod, next string) error {
		problems, err := checkModule(repo, scratch, env, m, next)
		if err != nil {
			return err
		}
		if len(problems) == 0 {
			fmt.Fprintf(w, "ok    %-22s go %s\n", m.dir, m.file.Go.Version)
			return nil
		}
		fmt.Fprintf(w, "FAIL  %-22s %s\n", m.dir, strings.Join(problems, "\n      "))
		return errors.New(strings.Join(problems, "; "))
	})
}

// tidy tidies each module of go.work against the release's proxy, and takes go.sum's lines for
// our own modules out again.
func tidy(repo string, w io.Writer) error {
	return eachModule(repo, func(_ string, env []string, m gomod, _ string) error {
		dir := filepath.Join(repo, filepath.FromSlash(m.dir))
		if _, stderr, err := goCommand(dir, env, "mod", "tidy"); err != nil {
			return fmt.Errorf("go mod tidy: %w\n%s", err, stderr)
		}
		sum, err := os.ReadFile(filepath.Join(dir, "go.sum"))
		if os.IsNotExist(err) {
			return nil
		}
		if err != nil {
			return err
		}
		var kept []string
		for _, line := range strings.SplitAfter(string(sum), "\n") {
			if !ourHash(line) {
				kept = append(kept, line)
			}
		}
		fmt.Fprintf(w, "tidy  %s\n", m.dir)
		return os.WriteFile(filepath.Join(dir, "go.sum"), []byte(strings.Join(kept, "")), 0o644)
	})
}

// eachModule calls do for each module of go.work, with a go command's environment that fetches
// every one of them at the next version from a proxy written from the working tree; an error
// names its module, and they are joined.
func eachModule(repo string, do func(scratch string, env []string, m gomod, next string) error) error {
	modules, err := workspace(repo)
	if err != nil {
		return err
	}
	next, err := nextVersion(repo)
	if err != nil {
		return err
	}
	scratch, err := os.MkdirTemp("", "pglock-release-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(scratch)
	proxyDir, cacheDir := filepath.Join(scratch, "proxy"), filepath.Join(scratch, "cache")
	dirs := make([]string, len(modules))
	for i, m := range modules {
		dirs[i] = m.dir
	}
	if err := writeProxy(repo, proxyDir, dirs, next); err != nil {
		return err
	}
	env, err := fetching(proxyDir, cacheDir)
	if err != nil {
		return err
	}
	var failed []error
	for _, m := range modules {
		if err := do(scratch, env, m, next); err != nil {
			failed = append(failed, fmt.Errorf("%s: %w", m.dir, err))
		}
	}
	return errors.Join(failed...)
}

func checkModule(repo, scratch string, env []string, m gomod, next string) (problems []string, err error) {
	for _, r := range m.file.Replace {
		problems = append(problems, fmt.Sprintf("replaces %s: a published module's replace is ignored by its users; go.work stands in for the next version", r.Old.Path))
	}
	for _, r := range m.file.Require {
		switch ours := isOurs(r.Mod.Path); {
		case ours && r.Mod.Version != next:
			problems = append(problems, fmt.Sprintf("requires %s %s, not the next version %s", r.Mod.Path, r.Mod.Version, next))
		case ours && isPublished(m.dir) && !isPublished(strings.TrimPrefix(strings.TrimPrefix(r.Mod.Path, rootPath), "/")):
			problems = append(problems, fmt.Sprintf("is published and requires %s, which is not", r.Mod.Path))
		}
	}
	dir := filepath.Join(repo, filepath.FromSlash(m.dir))
	// -diff exits with 1 and a diff on stdout when the module is not tidy; anything on stderr
	// but the downloads is tidy failing (a package it cannot find, a checksum that differs).
	diff, stderr, err := goCommand(dir, env, "mod", "tidy", "-diff")
	if complaints := withoutDownloads(stderr); err != nil && (complaints != "" || diff == "") {
		return nil, fmt.Errorf("go mod tidy -diff: %w\n%s", err, complaints)
	}
	sum, err := os.ReadFile(filepath.Join(dir, "go.sum"))
	if err != nil && !os.IsNotExist(err) {
		return nil, err
	}
	for _, line := range strings.Split(string(sum), "\n") {
		if ourHash(line) {
			problems = append(problems, fmt.Sprintf("go.sum holds %q: our modules' hashes exist once the release is tagged (make generate takes it out)", line))
		}
	}
	if untidy := untidyLines(diff); len(untidy) > 0 {
		problems = append(problems, "not tidy (make generate tidies it); go mod tidy -diff says:\n        "+strings.Join(untidy, "\n        "))
	}
	// The go line's floor: the newest go line among the modules its build list holds. go list
	// runs on a copy of go.mod and go.sum, since it would add our own modules' lines to go.sum.
	graph, err := os.MkdirTemp(scratch, "graph-")
	if err != nil {
		return nil, err
	}
	for _, name := range []string{"go.mod", "go.sum"} {
		content, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil && !os.IsNotExist(err) {
			return nil, err
		}
		if err := os.WriteFile(filepath.Join(graph, name), content, 0o644); err != nil {
			return nil, err
		}
	}
	out, stderr, err := goCommand(graph, env, "list", "-mod=mod", "-m", "-f", "{{if not .Main}}{{.Path}} {{.GoVersion}}{{end}}", "all")
	if err != nil {
		return nil, fmt.Errorf("go list -m all: %w\n%s", err, stderr)
	}
	floor, by := "1.0", "nothing"
	for _, line := range strings.Split(out, "\n") {
		fields := strings.Fields(line)
		if len(fields) == 2 && version.Compare("go"+fields[1], "go"+floor) > 0 {
			floor, by = fields[1], fields[0]
		}
	}
	if version.Compare("go"+m.file.Go.Version, "go"+floor) > 0 {
		problems = append(problems, fmt.Sprintf("go %s is newer than its requirements need: go %s (%s's)", m.file.Go.Version, floor, by))
	}
	return problems, nil
}

// untidyLines is what go mod tidy -diff would change, less go.sum's lines for our own modules:
// their hashes exist once the release is tagged, and a user's go.sum gets them then.
func untidyLines(diff string) []string {
	var lines []string
	for _, line := range strings.Split(diff, "\n") {
		if strings.HasPrefix(line, "+++") || strings.HasPrefix(line, "---") || !(strings.HasPrefix(line, "+") || strings.HasPrefix(line, "-")) {
			continue
		}
		if ourHash(line[1:]) {
			continue
		}
		lines = append(lines, line)
	}
	return lines
}

// withoutDownloads is a go command's stderr without the lines that say what it fetched
// ("go: downloading", "go: finding module for package", "go: found").
func withoutDownloads(stderr string) string {
	var kept []string
	for _, line := range strings.Split(stderr, "\n") {
		if line != "" && !strings.HasPrefix(line, "go: downloading ") && !strings.HasPrefix(line, "go: finding module for package ") &&
			!strings.HasPrefix(line, "go: found ") {
			kept = append(kept, line)
		}
	}
	return strings.Join(kept, "\n")
}

// ourHash reports whether a go.sum line is the hash of a module of ours.
func ourHash(line string) bool {
	fields := strings.Fields(line)
	return len(fields) == 3 && isOurs(fields[0]) && strings.HasPrefix(fields[2], "h1:")
}

// goCommand runs go with args in dir under env: what it wrote to stdout, and to stderr.
func goCommand(dir string, env []string, args ...string) (stdout, stderr string, err error) {
	cmd := exec.Command("go", args...)
	cmd.Dir, cmd.Env = dir, env
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err = cmd.Run()
	return out.String(), errOut.String(), err
}

// tags prints the tags that release the published modules at the next version, once the
// working tree is clean and pglock.Version says that version.
func tags(repo string, w io.Writer) error {
	next, err := nextVersion(repo)
	if err != nil {
		return err
	}
	if pglock.Version != next {
		return fmt.Errorf("version.go says %s and the modules require %s: set pglock.Version and CHANGELOG.md's heading to %s first", pglock.Version, next, next)
	}
	changelog, err := os.ReadFile(filepath.Join(repo, "CHANGELOG.md"))
	if err != nil {
		return err
	}
	if !strings.Contains(string(changelog), "\n## "+next+" ") {
		return fmt.Errorf("CHANGELOG.md has no heading for %s (\"## %s — date\")", next, next)
	}
	status := exec.Command("git", "status", "--porcelain")
	status.Dir = repo
	out, err := status.Output()
	if err != nil {
		return fmt.Errorf("git status: %w", err)
	}
	if len(out) > 0 {
		return fmt.Errorf("the working tree has changes: tag only what CI checked\n%s", out)
	}
	var names []string
	for _, dir := range published {
		name := next
		if dir != "." {
			name = dir + "/" + next
		}
		exists := exec.Command("git", "rev-parse", "-q", "--verify", "refs/tags/"+name)
		exists.Dir = repo
		if exists.Run() == nil {
			return fmt.Errorf("the tag %s exists already (fetch the remote's tags first): a released version never changes", name)
		}
		names = append(names, name)
	}
	for _, name := range names {
		fmt.Fprintf(w, "git tag -a %s -m 'pglock %s'\n", name, name)
	}
	fmt.Fprintf(w, "git push origin %s\n", strings.Join(names, " "))
	return nil
}
