package testdb

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
)

// Cluster is a PostgreSQL server of this process's own, from local binaries: unlike the server
// the tests share, it can be crashed, restarted, replicated and promoted. The chaos suite and
// the failover test use it; New's throwaway server is one too.
type Cluster struct {
	bin, dir, data string
	port           int
	owner          *owner
	settings       []string // name=value, given to every start

	mu       sync.Mutex
	postgres *exec.Cmd
	exited   <-chan struct{}
}

// StartCluster runs initdb into a temporary directory and starts a server on a free loopback
// port (max_connections=300), as the postgres user when running as root (PostgreSQL refuses
// root), from the binaries findServer would use. The server is this process's child and is
// told to quit when this process dies (on Linux), so a killed test leaves no server behind.
// Remove stops it and deletes its directory.
func StartCluster(ctx context.Context) (*Cluster, error) {
	bin, err := findPostgresBin()
	if err != nil {
		return nil, err
	}
	return startCluster(ctx, bin)
}

func startCluster(ctx context.Context, bin string) (*Cluster, error) {
	c, err := newCluster(bin, nil)
	if err != nil {
		return nil, err
	}
	initdb := c.command(ctx, "initdb", "-D", c.data, "-U", "postgres", "-A", "trust", "-E", "UTF8", "--no-locale", "--no-sync")
	if out, err := initdb.CombinedOutput(); err != nil {
		c.Remove()
		return nil, fmt.Errorf("testdb: initdb: %w: %s", err, out)
	}
	if err := c.Start(ctx); err != nil {
		c.Remove()
		return nil, err
	}
	return c, nil
}

// newCluster makes the directory of a cluster not yet created, and picks its port.
func newCluster(bin string, settings []string) (*Cluster, error) {
	dir, o, err := ownedDir("pglock-testdb-")
	if err != nil {
		return nil, err
	}
	port, err := FreePort()
	if err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("testdb: cluster: %w", err)
	}
	return &Cluster{bin: bin, dir: dir, data: filepath.Join(dir, "data"), port: port, owner: o, settings: settings}, nil
}

// command runs one of PostgreSQL's programs as the cluster's owner, in the cluster's directory.
func (c *Cluster) command(ctx context.Context, program string, args ...string) *exec.Cmd {
	return c.owner.command(ctx, c.dir, filepath.Join(c.bin, program), args...)
}

// URL is a superuser's URL to the cluster's postgres database.
func (c *Cluster) URL() string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", c.port)
}

// Log returns what the server has logged so far, for a failure's message.
func (c *Cluster) Log() string {
	log, _ := os.ReadFile(filepath.Join(c.dir, "postgres.log"))
	return string(log)
}

// Port is the loopback port the cluster listens on.
func (c *Cluster) Port() int { return c.port }

// Addr is the cluster's host:port, as a Proxy's upstream.
func (c *Cluster) Addr() string { return fmt.Sprintf("127.0.0.1:%d", c.port) }

// Start starts the server (again) and waits until it accepts connections.
func (c *Cluster) Start(ctx context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.postgres != nil {
		return errors.New("testdb: cluster already running")
	}
	logFile, err := os.OpenFile(filepath.Join(c.dir, "postgres.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer logFile.Close()
	args := []string{"-D", c.data, "-p", strconv.Itoa(c.port), "-k", c.dir,
		"-c", "listen_addresses=127.0.0.1", "-c", "max_connections=300"}
	for _, s := range c.settings {
		args = append(args, "-c", s)
	}
	postgres := c.command(context.Background(), "postgres", args...)
	postgres.Stdout, postgres.Stderr = logFile, logFile
	exited, err := StartChild(postgres)
	if err != nil {
		return fmt.Errorf("testdb: start postgres: %w", err)
	}
	c.postgres, c.exited = postgres, exited
	if err := waitForServer(ctx, c.URL(), exited); err != nil {
		c.stopLocked(syscall.SIGQUIT)
		return fmt.Errorf("testdb: cluster on port %d: %w; its log:\n%s", c.port, err, logExcerpt(logFile.Name()))
	}
	return nil
}

// Crash stops the server as a crash would: an immediate shutdown, no checkpoint, every
// connection cut; the next Start recovers from the WAL.
func (c *Cluster) Crash() error { return c.stop(syscall.SIGQUIT) }

// Stop shuts the server down fast: sessions are ended, a checkpoint is written.
func (c *Cluster) Stop() error { return c.stop(syscall.SIGINT) }

func (c *Cluster) stop(sig syscall.Signal) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.stopLocked(sig)
}

func (c *Cluster) stopLocked(sig syscall.Signal) error {
	if c.postgres == nil {
		return nil
	}
	err := c.postgres.Process.Signal(sig)
	<-c.exited
	c.postgres = nil
	return err
}

// Remove stops the server, if it runs, and deletes the cluster's directory.
func (c *Cluster) Remove() error {
	err := c.Stop()
	return errors.Join(err, os.RemoveAll(c.dir))
}

// Standby makes a streaming replica of c with pg_basebackup and starts it with settings (a
// cluster_name=... setting names it to the primary, for synchronous_standby_names). It reaches
// c at port: c.Port(), or a Proxy's in front of it, which then carries the replication.
func (c *Cluster) Standby(ctx context.Context, port int, settings ...string) (*Cluster, error) {
	s, err := newCluster(c.bin, settings)
	if err != nil {
		return nil, err
	}
	backup := s.command(ctx, "pg_basebackup", "-h", "127.0.0.1",
		"-p", strconv.Itoa(port), "-U", "postgres", "-D", s.data, "-R", "-X", "stream", "--checkpoint=fast")
	if out, err := backup.CombinedOutput(); err != nil {
		s.Remove()
		return nil, fmt.Errorf("testdb: pg_basebackup: %w: %s", err, out)
	}
	if err := s.Start(ctx); err != nil {
		s.Remove()
		return nil, err
	}
	return s, nil
}

// Promote makes a standby a primary and waits until it accepts writes.
func (c *Cluster) Promote(ctx context.Context) error {
	promote := c.command(ctx, "pg_ctl", "promote", "-w", "-D", c.data)
	if out, err := promote.CombinedOutput(); err != nil {
		return fmt.Errorf("testdb: pg_ctl promote: %w: %s", err, out)
	}
	return nil
}
