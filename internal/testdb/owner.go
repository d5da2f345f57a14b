package testdb

import (
	"context"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// owner is the user the harness runs PostgreSQL, Patroni and PgBouncer as: the postgres user
// when this process is root (all three refuse root), nil for the current user.
type owner struct {
	name     string
	uid, gid uint32
}

// serverOwner returns the user to run servers as: nil for the current user, or the postgres
// user when running as root.
func serverOwner() (*owner, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	u, err := user.Lookup("postgres")
	if err != nil {
		return nil, fmt.Errorf("running as root needs a postgres user to run the server as: %w", err)
	}
	uid, err := strconv.ParseUint(u.Uid, 10, 32)
	if err != nil {
		return nil, err
	}
	gid, err := strconv.ParseUint(u.Gid, 10, 32)
	if err != nil {
		return nil, err
	}
	return &owner{name: u.Username, uid: uint32(uid), gid: uint32(gid)}, nil
}

// ownedDir makes a temporary directory for a server, owned by the user it runs as (o, from
// serverOwner), and fails at once, naming the directory in the way, when that user could not
// enter it (TMPDIR under a 0700 directory, say): a server that cannot reach its files does not
// exit, it retries until a wait times out.
func ownedDir(prefix string) (dir string, o *owner, err error) {
	if o, err = serverOwner(); err != nil {
		return "", nil, fmt.Errorf("testdb: %w", err)
	}
	if dir, err = os.MkdirTemp("", prefix); err != nil {
		return "", nil, err
	}
	if o != nil {
		err = os.Chown(dir, int(o.uid), int(o.gid))
		if err == nil {
			err = o.canEnter(filepath.Dir(dir))
		}
	}
	if err != nil {
		os.RemoveAll(dir)
		return "", nil, fmt.Errorf("testdb: %w", err)
	}
	return dir, o, nil
}

// canEnter fails when o may not search dir or one of the directories above it, on the path as
// written and, through symbolic links, on the path they lead to.
func (o *owner) canEnter(dir string) error {
	dir, err := filepath.Abs(dir)
	if err != nil {
		return err
	}
	if err := o.canEnterPath(dir); err != nil {
		return err
	}
	if target, err := filepath.EvalSymlinks(dir); err == nil && target != dir {
		return o.canEnterPath(target)
	}
	return nil
}

func (o *owner) canEnterPath(dir string) error {
	for {
		info, err := os.Stat(dir)
		if err != nil {
			return err
		}
		if !o.maySearch(info) {
			return fmt.Errorf("user %s (uid %d), which runs the servers, cannot enter %s (mode %v): "+
				"set TMPDIR to a directory it can reach, or make the directories above it searchable (chmod o+x)",
				o.name, o.uid, dir, info.Mode().Perm())
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return nil
		}
		dir = parent
	}
}

// maySearch applies the kernel's rule for the execute bit: the owner's bits for the file's
// owner, else the group's for its group, else the others'. Credential sets no supplementary
// groups, so the primary group is the only one.
func (o *owner) maySearch(info fs.FileInfo) bool {
	st, ok := info.Sys().(*syscall.Stat_t)
	if !ok {
		return true
	}
	perm := info.Mode().Perm()
	switch {
	case st.Uid == o.uid:
		return perm&0o100 != 0
	case st.Gid == o.gid:
		return perm&0o010 != 0
	default:
		return perm&0o001 != 0
	}
}

// command is exec.CommandContext for a program run as o in dir. The working directory matters: a
// child inherits this process's, a test's package directory inside the checkout, which another
// user cannot enter when the checkout lies under a 0700 directory (mktemp -d, root's home);
// Patroni then never starts its node.
func (o *owner) command(ctx context.Context, dir, program string, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, program, args...)
	cmd.Dir = dir
	cmd.SysProcAttr = &syscall.SysProcAttr{}
	if o != nil {
		cmd.SysProcAttr.Credential = &syscall.Credential{Uid: o.uid, Gid: o.gid}
	}
	return cmd
}

// logExcerpt is the start and the end of the log at path, for a failure's message: the harness
// removes its directories when a test ends, so a path would name a file nobody can read; and
// the cause is often in the first lines of a log that a server stuck in a loop has made long.
func logExcerpt(path string) string {
	content, err := os.ReadFile(path)
	if err != nil {
		return fmt.Sprintf("(no log: %v)", err)
	}
	const head, tail = 15, 40
	lines := strings.Split(strings.TrimRight(string(content), "\n"), "\n")
	if len(lines) <= head+tail {
		return strings.Join(lines, "\n")
	}
	return strings.Join(lines[:head], "\n") + fmt.Sprintf("\n… (%d lines) …\n", len(lines)-head-tail) +
		strings.Join(lines[len(lines)-tail:], "\n")
}
