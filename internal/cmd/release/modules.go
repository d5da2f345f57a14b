package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"golang.org/x/mod/modfile"
)

// rootPath is the root module's path; every module of the repository's is under it.
const rootPath = "github.com/pglock/pglock"

// published are the modules a user fetches, by directory: tagged together at each release,
// with one version. The others in go.work are the repository's own (tests, programs): never
// tagged, and under internal/ where Go lets nothing outside the repository import them.
var published = []string{".", "gocronlock", "otelpglock", "redislock"}

// isOurs reports whether a module path is the root module's or one under it.
func isOurs(path string) bool { return path == rootPath || strings.HasPrefix(path, rootPath+"/") }

// isPublished reports whether the module in dir is one of published.
func isPublished(dir string) bool {
	if dir == "" {
		dir = "."
	}
	return slices.Contains(published, dir)
}

// gomod is one module of go.work.
type gomod struct {
	dir  string // in the repository, slash-separated; "." for the root
	file *modfile.File
}

func (m gomod) path() string { return m.file.Module.Mod.Path }

// findRepo is the directory of go.work, from the working directory up.
func findRepo() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.work")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("no go.work in this directory or above: run release from the repository")
		}
		dir = parent
	}
}

// workspace is go.work's modules.
func workspace(repo string) ([]gomod, error) {
	content, err := os.ReadFile(filepath.Join(repo, "go.work"))
	if err != nil {
		return nil, err
	}
	work, err := modfile.ParseWork("go.work", content, nil)
	if err != nil {
		return nil, err
	}
	var modules []gomod
	for _, use := range work.Use {
		dir := filepath.ToSlash(filepath.Clean(use.Path))
		m, err := readModule(repo, dir)
		if err != nil {
			return nil, err
		}
		modules = append(modules, m)
	}
	return modules, nil
}

func readModule(repo, dir string) (gomod, error) {
	name := filepath.Join(repo, filepath.FromSlash(dir), "go.mod")
	content, err := os.ReadFile(name)
	if err != nil {
		return gomod{}, err
	}
	file, err := modfile.Parse(name, content, nil)
	if err != nil {
		return gomod{}, err
	}
	return gomod{dir: dir, file: file}, nil
}

// nextVersion is the version of the root module the published modules require: the one the
// next release tags.
func nextVersion(repo string) (string, error) {
	versions := map[string][]string{} // by version: the modules requiring it
	for _, dir := range published[1:] {
		m, err := readModule(repo, dir)
		if err != nil {
			return "", err
		}
		for _, r := range m.file.Require {
			if r.Mod.Path == rootPath {
				versions[r.Mod.Version] = append(versions[r.Mod.Version], dir)
			}
		}
	}
	if len(versions) != 1 {
		return "", fmt.Errorf("the published modules %s must require one version of %s; they require %v", strings.Join(published[1:], ", "), rootPath, versions)
	}
	for v := range versions {
		return v, nil
	}
	panic("unreachable")
}
