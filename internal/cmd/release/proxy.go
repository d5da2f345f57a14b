package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/mod/module"
	"golang.org/x/mod/zip"
)

// writeProxy writes into dir a module proxy (GOPROXY=file://dir) that serves the modules in
// dirs at version, each zipped from the working tree as the release's tag will find it: the
// files git tracks or would track (nothing it ignores, such as built binaries), without the
// modules nested in it.
func writeProxy(repo, dir string, dirs []string, version string) error {
	for _, d := range dirs {
		m, err := readModule(repo, d)
		if err != nil {
			return err
		}
		if err := writeVersion(repo, dir, m, version); err != nil {
			return fmt.Errorf("%s@%s: %w", m.path(), version, err)
		}
	}
	return nil
}

func writeVersion(repo, dir string, m gomod, version string) error {
	escaped, err := module.EscapePath(m.path())
	if err != nil {
		return err
	}
	at := filepath.Join(dir, filepath.FromSlash(escaped), "@v")
	if err := os.MkdirAll(at, 0o755); err != nil {
		return err
	}
	files, err := treeFiles(repo, m.dir)
	if err != nil {
		return err
	}
	var zipped bytes.Buffer
	if err := zip.Create(&zipped, module.Version{Path: m.path(), Version: version}, files); err != nil {
		return err
	}
	goMod, err := os.ReadFile(filepath.Join(repo, filepath.FromSlash(m.dir), "go.mod"))
	if err != nil {
		return err
	}
	info, err := json.Marshal(struct {
		Version string
		Time    time.Time
	}{version, time.Now().UTC().Truncate(time.Second)})
	if err != nil {
		return err
	}
	for name, content := range map[string][]byte{
		version + ".zip": zipped.Bytes(), version + ".mod": goMod, version + ".info": info, "list": []byte(version + "\n"),
	} {
		if err := os.WriteFile(filepath.Join(at, name), content, 0o644); err != nil {
			return err
		}
	}
	return nil
}

// treeFiles is what the module in dir holds in the working tree, as a tag of it would: git's
// tracked files that still exist and its untracked ones that it does not ignore. zip.Create
// leaves out those of modules nested in it.
func treeFiles(repo, dir string) ([]zip.File, error) {
	cmd := exec.Command("git", "ls-files", "-z", "--cached", "--others", "--exclude-standard", "--", dir)
	cmd.Dir = repo
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("git ls-files: %w", err)
	}
	var files []zip.File
	seen := map[string]bool{}
	for _, name := range strings.Split(strings.TrimSuffix(string(out), "\x00"), "\x00") {
		if name == "" || seen[name] {
			continue
		}
		seen[name] = true
		full := filepath.Join(repo, filepath.FromSlash(name))
		info, err := os.Lstat(full)
		if os.IsNotExist(err) {
			continue // deleted, not yet committed
		}
		if err != nil {
			return nil, err
		}
		rel := name
		if dir != "." {
			rel = strings.TrimPrefix(name, dir+"/")
		}
		files = append(files, treeFile{rel: path.Clean(rel), full: full, info: info})
	}
	return files, nil
}

type treeFile struct {
	rel  string
	full string
	info os.FileInfo
}

func (f treeFile) Path() string                 { return f.rel }
func (f treeFile) Lstat() (os.FileInfo, error)  { return f.info, nil }
func (f treeFile) Open() (io.ReadCloser, error) { return os.Open(f.full) }
