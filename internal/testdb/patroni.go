package testdb

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Patroni is what users run for failover, on loopback ports of its own: one etcd and two
// PostgreSQL nodes under Patroni (Debian's patroni and etcd-server), node 0 bootstrapped as the
// primary and node 1 streaming from it. Patroni fails over at once when the primary's postmaster
// dies (master_start_timeout 0), and leads with a 10 s lease in etcd (loop_wait 1 s).
type Patroni struct {
	dir, bin string
	turn     *os.File // held from start to Close: one Patroni cluster at a time on a machine
	owner    *owner
	etcd     *exec.Cmd
	etcdDone <-chan struct{}
	nodes    [2]*patroniNode
}

type patroniNode struct {
	name           string
	apiPort, port  int
	data, log, yml string
	cmd            *exec.Cmd
	exited         <-chan struct{}
}

// PatroniOptions choose the cluster's replication. A nil *PatroniOptions means asynchronous.
type PatroniOptions struct {
	// Synchronous turns Patroni's synchronous_mode on: a commit is acknowledged once the standby
	// has it, and only a synchronous standby is promoted.
	Synchronous bool
}

// patroniStart bounds the cluster's start: etcd, the bootstrap of the primary, the standby's
// base backup. A standby up to 64 MB behind may still be promoted (maximum_lag_on_failover), so
// that a failover after replication was held up (make ha) is not refused.
const patroniStart = 90 * time.Second

// NewPatroni is StartPatroni for a test, closed when it ends. Without Patroni or etcd installed
// the test is skipped with one line, and fails under CI=true, as the PgBouncer tests do.
func NewPatroni(t testing.TB, opts *PatroniOptions) *Patroni {
	t.Helper()
	if err := patroniInstalled(); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal(err)
		}
		t.Skip(err)
	}
	p, err := StartPatroni(context.Background(), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

func patroniInstalled() error {
	for _, program := range []string{"patroni", "etcd"} {
		if _, err := exec.LookPath(program); err != nil {
			return fmt.Errorf("testdb: %s is not installed (Debian: apt-get install patroni etcd-server): %w", program, err)
		}
	}
	return nil
}

// StartPatroni starts the cluster and returns once node 0 is the primary and node 1 streams from
// it (synchronously, with Synchronous). The processes run as the postgres user when this one is
// root; Close stops them all and removes the directory.
func StartPatroni(ctx context.Context, opts *PatroniOptions) (p *Patroni, err error) {
	if opts == nil {
		opts = &PatroniOptions{}
	}
	if err := patroniInstalled(); err != nil {
		return nil, err
	}
	bin, err := findPostgresBin()
	if err != nil {
		return nil, err
	}
	p = &Patroni{bin: bin}
	if p.dir, p.owner, err = ownedDir("pglock-patroni-"); err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			p.Close()
			p = nil
		}
	}()
	if p.turn, err = waitTurn(ctx); err != nil {
		return p, err
	}
	ctx, cancel := context.WithTimeout(ctx, patroniStart)
	defer cancel()
	etcdPort, err := FreePort()
	if err != nil {
		return p, err
	}
	if err := p.startEtcd(ctx, etcdPort); err != nil {
		return p, err
	}
	for i := range p.nodes {
		n := &patroniNode{name: fmt.Sprintf("n%d", i)}
		if n.apiPort, err = FreePort(); err != nil {
			return p, err
		}
		if n.port, err = FreePort(); err != nil {
			return p, err
		}
		n.data, n.log, n.yml = filepath.Join(p.dir, n.name), filepath.Join(p.dir, n.name+".log"), filepath.Join(p.dir, n.name+".yml")
		if err := os.WriteFile(n.yml, []byte(p.nodeConfig(n, etcdPort, opts.Synchronous)), 0o644); err != nil {
			return p, err
		}
		p.nodes[i] = n
	}
	if err := p.chownAll(); err != nil {
		return p, err
	}
	if err := p.startNode(p.nodes[0]); err != nil {
		return p, err
	}
	if err := p.waitFor(ctx, 0, "primary"); err != nil {
		return p, err
	}
	if err := p.startNode(p.nodes[1]); err != nil {
		return p, err
	}
	role := "replica"
	if opts.Synchronous {
		role = "sync"
	}
	return p, p.waitFor(ctx, 1, role)
}

func (p *Patroni) startEtcd(ctx context.Context, port int) error {
	peer, err := FreePort()
	if err != nil {
		return err
	}
	client, peerURL := fmt.Sprintf("http://127.0.0.1:%d", port), fmt.Sprintf("http://127.0.0.1:%d", peer)
	log, err := os.Create(filepath.Join(p.dir, "etcd.log"))
	if err != nil {
		return err
	}
	defer log.Close()
	etcd := exec.Command("etcd", "--name", "e", "--data-dir", filepath.Join(p.dir, "etcd"),
		"--listen-client-urls", client, "--advertise-client-urls", client,
		"--listen-peer-urls", peerURL, "--initial-advertise-peer-urls", peerURL,
		"--initial-cluster", "e="+peerURL, "--initial-cluster-state", "new", "--initial-cluster-token", filepath.Base(p.dir))
	etcd.Dir, etcd.Stdout, etcd.Stderr = p.dir, log, log
	done, err := StartChild(etcd)
	if err != nil {
		return err
	}
	p.etcd, p.etcdDone = etcd, done // only once started: Close waits for what it finds here
	return poll(ctx, func() bool { return status(client+"/health") == http.StatusOK }, "etcd answers", p.etcdDone, log.Name())
}

// nodeConfig is node n's patroni.yml: trust on loopback, its own pgpass, its own socket
// directory.
func (p *Patroni) nodeConfig(n *patroniNode, etcdPort int, synchronous bool) string {
	return fmt.Sprintf(`scope: %[1]s
name: %[2]s
restapi: {listen: "127.0.0.1:%[3]d", connect_address: "127.0.0.1:%[3]d"}
etcd3: {hosts: ["127.0.0.1:%[4]d"]}
bootstrap:
  dcs:
    ttl: 10
    loop_wait: 1
    retry_timeout: 3
    master_start_timeout: 0
    maximum_lag_on_failover: 67108864
    synchronous_mode: %[5]t
    postgresql:
      use_pg_rewind: true
      parameters: {wal_level: replica, hot_standby: "on", wal_log_hints: "on", max_connections: 200}
  initdb: [{encoding: UTF8}, {auth: trust}, no-sync]
postgresql:
  listen: "127.0.0.1:%[6]d"
  connect_address: "127.0.0.1:%[6]d"
  data_dir: %[7]s
  bin_dir: %[8]s
  pgpass: %[7]s.pgpass
  authentication:
    superuser: {username: postgres, password: postgres}
    replication: {username: replicator, password: replicator}
    rewind: {username: postgres, password: postgres}
  parameters: {unix_socket_directories: "%[9]s"}
  pg_hba: ["local all all trust", "host all all 127.0.0.1/32 trust", "host replication replicator 127.0.0.1/32 trust"]
`, filepath.Base(p.dir), n.name, n.apiPort, etcdPort, synchronous, n.port, n.data, p.bin, p.dir)
}

func (p *Patroni) chownAll() error {
	if p.owner == nil {
		return nil
	}
	return filepath.Walk(p.dir, func(path string, _ os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		return os.Chown(path, int(p.owner.uid), int(p.owner.gid))
	})
}

func (p *Patroni) startNode(n *patroniNode) error {
	log, err := os.OpenFile(n.log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer log.Close()
	cmd := p.owner.command(context.Background(), p.dir, "patroni", n.yml)
	cmd.Env = append(os.Environ(), "HOME="+p.dir)
	cmd.Stdout, cmd.Stderr = log, log
	exited, err := StartChild(cmd)
	if err != nil {
		return err
	}
	n.cmd, n.exited = cmd, exited // only once started: Close waits for what it finds here
	return nil
}

// waitFor waits until node i answers 200 on its REST API's endpoint for role: "primary",
// "replica" or "sync".
func (p *Patroni) waitFor(ctx context.Context, i int, role string) error {
	n := p.nodes[i]
	return poll(ctx, func() bool { return status(fmt.Sprintf("http://127.0.0.1:%d/%s", n.apiPort, role)) == http.StatusOK },
		fmt.Sprintf("%s is %s", n.name, role), n.exited, n.log)
}

// URL is the multi-host connection string of database on the cluster, as clients behind Patroni
// use: every node, and target_session_attrs=read-write so that a connection reaches the primary
// wherever it is.
func (p *Patroni) URL(database string) string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d,127.0.0.1:%d/%s?sslmode=disable&target_session_attrs=read-write&connect_timeout=2",
		p.nodes[0].port, p.nodes[1].port, database)
}

// Primary is the node that Patroni says leads now, or an error if none does or both do.
func (p *Patroni) Primary() (int, error) {
	primary := -1
	for i, n := range p.nodes {
		if status(fmt.Sprintf("http://127.0.0.1:%d/primary", n.apiPort)) == http.StatusOK {
			if primary >= 0 {
				return -1, errors.New("testdb: both nodes say they are the primary")
			}
			primary = i
		}
	}
	if primary < 0 {
		return -1, errors.New("testdb: no node is the primary")
	}
	return primary, nil
}

// KillPostmaster sends SIGKILL to node i's postmaster: the crash of its server, which Patroni
// (alive) answers by failing over to the other node.
func (p *Patroni) KillPostmaster(i int) error {
	pid, err := postmasterPID(p.nodes[i].data)
	if err != nil {
		return err
	}
	return syscall.Kill(pid, syscall.SIGKILL)
}

// WaitPrimary waits until node i is the primary.
func (p *Patroni) WaitPrimary(ctx context.Context, i int) error {
	ctx, cancel := context.WithTimeout(ctx, patroniStart)
	defer cancel()
	return p.waitFor(ctx, i, "primary")
}

// Log is the start and the end of every node's log, for a failure's report.
func (p *Patroni) Log() string {
	var b strings.Builder
	for _, n := range p.nodes {
		if n == nil {
			continue
		}
		fmt.Fprintf(&b, "--- %s\n%s\n", n.name, logExcerpt(n.log))
	}
	return b.String()
}

// Close stops the nodes (Patroni stops its PostgreSQL; any postmaster left is told to quit) and
// etcd, and removes the cluster's directory.
func (p *Patroni) Close() error {
	for _, n := range p.nodes {
		if n != nil && n.cmd != nil {
			n.cmd.Process.Signal(syscall.SIGTERM)
		}
	}
	for _, n := range p.nodes {
		if n == nil || n.cmd == nil {
			continue
		}
		select {
		case <-n.exited:
		case <-time.After(20 * time.Second):
			n.cmd.Process.Kill()
			<-n.exited
		}
		// Patroni starts its postmaster in a session of its own: it outlives a Patroni that
		// did not stop it, and must be gone before its directory is.
		if pid, err := postmasterPID(n.data); err == nil && syscall.Kill(pid, syscall.SIGQUIT) == nil {
			for deadline := time.Now().Add(10 * time.Second); syscall.Kill(pid, 0) == nil && time.Now().Before(deadline); {
				time.Sleep(50 * time.Millisecond)
			}
		}
	}
	if p.etcd != nil {
		p.etcd.Process.Kill()
		<-p.etcdDone
	}
	err := os.RemoveAll(p.dir)
	p.turn.Close() // releases the turn
	return err
}

// turnFile is where the Patroni clusters of every process and user on this machine take turns:
// a fixed path, whatever TMPDIR each has.
const turnFile = "/tmp/pglock-patroni.turn"

// turnWait bounds the wait for another cluster: make ha's longest run, with room.
const turnWait = 5 * time.Minute

// waitTurn waits until no other Patroni cluster runs on this machine, and holds the turn
// (an exclusive flock, released when the file is closed or the process dies) for the caller.
// go test ./... runs packages in parallel processes, and two clusters at once (two etcd, four
// postmasters, four Patroni daemons on a 2-core machine) starve each other's 1 s loops.
func waitTurn(ctx context.Context) (*os.File, error) {
	ctx, cancel := context.WithTimeout(ctx, turnWait)
	defer cancel()
	// Read-only is enough for flock, and opens a file another user made (O_CREAT would not, in
	// a sticky /tmp with protected_regular); whoever makes it lets every user open it.
	f, err := os.Open(turnFile)
	if errors.Is(err, fs.ErrNotExist) {
		if f, err = os.OpenFile(turnFile, os.O_CREATE|os.O_RDONLY, 0o666); err == nil {
			err = f.Chmod(0o666)
		}
	}
	if err != nil {
		if f != nil {
			f.Close()
		}
		return nil, fmt.Errorf("testdb: patroni: %w", err)
	}
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			return f, nil
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) {
			f.Close()
			return nil, fmt.Errorf("testdb: patroni: flock: %w", err)
		}
		select {
		case <-ctx.Done():
			f.Close()
			return nil, fmt.Errorf("testdb: patroni: waiting for the other cluster on this machine: %w", ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func postmasterPID(data string) (int, error) {
	content, err := os.ReadFile(filepath.Join(data, "postmaster.pid"))
	if err != nil {
		return 0, err
	}
	line, _, _ := strings.Cut(string(content), "\n")
	return strconv.Atoi(strings.TrimSpace(line))
}

// status is the HTTP status of a GET of url, or 0 when there is no answer.
func status(url string) int {
	client := http.Client{Timeout: time.Second}
	resp, err := client.Get(url)
	if err != nil {
		return 0
	}
	resp.Body.Close()
	return resp.StatusCode
}

// poll waits until cond holds, every 100 ms, or fails when ctx ends or the process behind it
// exits, with the end of the process's log.
func poll(ctx context.Context, cond func() bool, what string, exited <-chan struct{}, log string) error {
	for !cond() {
		var err error
		select {
		case <-ctx.Done():
			err = ctx.Err()
		case <-exited:
			err = errors.New("its process exited")
		case <-time.After(100 * time.Millisecond):
			continue
		}
		return fmt.Errorf("testdb: waiting until %s: %w; its log:\n%s", what, err, logExcerpt(log))
	}
	return nil
}
