// Package testredis starts redis-server processes of a test's own on free loopback ports, which
// the test can kill and start again: with their data (Durable: an append-only file fsynced at
// every write) or empty, as a node that lost it. The redislock tests and the benchmark use it.
package testredis

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/pglock/pglock/internal/testdb"
)

// Options configure a Server. A nil *Options means the defaults.
type Options struct {
	// Durable keeps the data across a Kill: appendonly yes with appendfsync always, in the
	// server's directory. Default: nothing on disk, so a restarted server is empty.
	Durable bool
}

// Server is one redis-server process of the test's own.
type Server struct {
	bin, dir string
	port     int
	opts     Options

	mu     sync.Mutex
	cmd    *exec.Cmd
	exited <-chan struct{}
}

// ErrNotInstalled means there is no redis-server on PATH.
var ErrNotInstalled = errors.New("testredis: redis-server is not on PATH (Debian, Ubuntu: apt-get install redis-server)")

// New starts a server for t and stops it when t ends. Without redis-server the test is skipped
// with one line, except under CI=true, where that fails it.
func New(t testing.TB, opts *Options) *Server {
	t.Helper()
	s, err := Start(context.Background(), opts)
	if errors.Is(err, ErrNotInstalled) && os.Getenv("CI") != "true" {
		t.Skip(err)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := s.Remove(); err != nil {
			t.Errorf("testredis: %v", err)
		}
	})
	return s
}

// Start starts a server on a free loopback port, in a temporary directory of its own, and waits
// until it answers. Remove stops it and deletes the directory.
func Start(ctx context.Context, opts *Options) (*Server, error) {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		return nil, ErrNotInstalled
	}
	port, err := testdb.FreePort()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "pglock-redis-")
	if err != nil {
		return nil, err
	}
	s := &Server{bin: bin, dir: dir, port: port}
	if opts != nil {
		s.opts = *opts
	}
	if err := s.Start(ctx); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	return s, nil
}

// Addr is the server's host:port.
func (s *Server) Addr() string { return "127.0.0.1:" + strconv.Itoa(s.port) }

// Start starts the server (again, on the same port and directory) and waits until it answers.
func (s *Server) Start(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd != nil {
		return errors.New("testredis: server already running")
	}
	args := []string{"--port", strconv.Itoa(s.port), "--bind", "127.0.0.1", "--dir", s.dir,
		"--daemonize", "no", "--save", "", "--logfile", "redis.log", "--protected-mode", "no"}
	if s.opts.Durable {
		args = append(args, "--appendonly", "yes", "--appendfsync", "always")
	} else {
		args = append(args, "--appendonly", "no")
	}
	cmd := exec.Command(s.bin, args...)
	exited, err := testdb.StartChild(cmd)
	if err != nil {
		return fmt.Errorf("testredis: start redis-server: %w", err)
	}
	s.cmd, s.exited = cmd, exited
	ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	for {
		if ping(s.Addr()) == nil {
			return nil
		}
		select {
		case <-exited:
			s.cmd = nil
			return fmt.Errorf("testredis: redis-server on port %d exited at start: %s", s.port, s.log())
		case <-ctx.Done():
			s.stopLocked(syscall.SIGKILL)
			return fmt.Errorf("testredis: redis-server on port %d did not answer: %w: %s", s.port, ctx.Err(), s.log())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// Kill stops the server with SIGKILL, as a crash or a lost machine would: what it had not
// written to disk is gone, and with it every connection.
func (s *Server) Kill() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stopLocked(syscall.SIGKILL)
}

// Restart kills the server and starts it again on its port: empty, unless Durable.
func (s *Server) Restart(ctx context.Context) error {
	if err := s.Kill(); err != nil {
		return err
	}
	return s.Start(ctx)
}

// Remove stops the server, if it runs, and deletes its directory.
func (s *Server) Remove() error {
	err := s.Kill()
	return errors.Join(err, os.RemoveAll(s.dir))
}

func (s *Server) stopLocked(sig syscall.Signal) error {
	if s.cmd == nil {
		return nil
	}
	err := s.cmd.Process.Signal(sig)
	<-s.exited
	s.cmd = nil
	return err
}

func (s *Server) log() string {
	b, _ := os.ReadFile(filepath.Join(s.dir, "redis.log"))
	return strings.TrimSpace(string(b))
}

// ping sends PING in RESP and expects +PONG: no client library needed.
func ping(addr string) error {
	conn, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return err
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(time.Second))
	if _, err := conn.Write([]byte("PING\r\n")); err != nil {
		return err
	}
	line, err := bufio.NewReader(conn).ReadString('\n')
	if err != nil {
		return err
	}
	if strings.TrimSpace(line) != "+PONG" {
		return fmt.Errorf("answered %q", line)
	}
	return nil
}
