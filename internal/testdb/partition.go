package testdb

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Proxy is a TCP relay in front of a PostgreSQL server: what passes through it can be cut off
// or slowed down without closing anything, as a network would.
type Proxy struct {
	Port int // the loopback port it listens on

	lifecycle sync.Mutex // one Repoint or Close at a time

	mu          sync.Mutex
	listener    net.Listener
	upstream    string
	links       map[*link]struct{}
	partitioned bool
	latency     time.Duration
	jitter      time.Duration
	closed      bool
	accepting   sync.WaitGroup // the accept loop of the current listener
	pumping     sync.WaitGroup // every link's goroutines
}

// link is one client connection and the connection to the upstream it was relayed to.
type link struct {
	client, server net.Conn
	cut            bool          // by a partition: what it reads is dropped until it is closed (p.mu)
	done           chan struct{} // closed with the link
	closed         sync.Once
}

func (l *link) close() {
	l.closed.Do(func() {
		close(l.done)
		l.client.Close()
		l.server.Close()
	})
}

// chunk is what one read brought, and when it may be written on.
type chunk struct {
	data []byte
	due  time.Time
}

// NewProxy starts a proxy to upstream (host:port) on a free loopback port.
func NewProxy(upstream string) (*Proxy, error) {
	p := &Proxy{upstream: upstream, links: map[*link]struct{}{}}
	if err := p.listen("127.0.0.1:0"); err != nil {
		return nil, err
	}
	p.Port = p.listener.Addr().(*net.TCPAddr).Port
	return p, nil
}

func (p *Proxy) listen(address string) error {
	listener, err := net.Listen("tcp", address)
	if err != nil {
		return fmt.Errorf("testdb: proxy: %w", err)
	}
	p.mu.Lock()
	p.listener = listener
	p.mu.Unlock()
	p.accepting.Add(1)
	go p.accept(listener)
	return nil
}

func (p *Proxy) accept(listener net.Listener) {
	defer p.accepting.Done()
	for {
		client, err := listener.Accept()
		if err != nil {
			return // the listener was closed
		}
		p.mu.Lock()
		upstream := p.upstream
		p.mu.Unlock()
		server, err := net.DialTimeout("tcp", upstream, 10*time.Second)
		if err != nil {
			client.Close()
			continue
		}
		l := &link{client: client, server: server, done: make(chan struct{})}
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			l.close()
			continue
		}
		l.cut = p.partitioned
		p.links[l] = struct{}{}
		p.pumping.Add(5)
		p.mu.Unlock()
		go p.relay(l, client, server)
		go p.relay(l, server, client)
		go func() { // the link leaves the proxy's list once closed, by either side or the proxy
			defer p.pumping.Done()
			<-l.done
			p.mu.Lock()
			delete(p.links, l)
			p.mu.Unlock()
		}()
	}
}

// relay copies from src to dst until either side closes: a reader stamps each chunk with the
// time it may be written (now, or later while the proxy is slowed), and a writer writes it then,
// so that a delay applies to each chunk from its arrival, as a slow network's would. When src
// closes, what it sent before is still delivered, then the link closes. While the link is cut
// by a partition, what it reads and what is still on its way is dropped.
func (p *Proxy) relay(l *link, src, dst net.Conn) {
	chunks := make(chan chunk, 64)
	go func() { // the writer
		defer p.pumping.Done()
		defer l.close()
		for {
			var c chunk
			var open bool
			select {
			case c, open = <-chunks:
				if !open {
					return // src closed: all it sent is written
				}
			case <-l.done:
				return
			}
			if wait := time.Until(c.due); wait > 0 {
				timer := time.NewTimer(wait)
				select {
				case <-timer.C:
				case <-l.done:
					timer.Stop()
					return
				}
			}
			p.mu.Lock()
			cut := l.cut
			p.mu.Unlock()
			if cut {
				continue
			}
			if _, err := dst.Write(c.data); err != nil {
				return
			}
		}
	}()
	defer p.pumping.Done()
	defer close(chunks)
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			p.mu.Lock()
			cut, delay := l.cut, p.latency
			if p.jitter > 0 {
				delay += time.Duration(rand.Int64N(int64(2*p.jitter))) - p.jitter
			}
			p.mu.Unlock()
			if !cut {
				c := chunk{data: append([]byte(nil), buf[:n]...), due: time.Now().Add(delay)}
				select {
				case chunks <- c:
				case <-l.done:
					return
				}
			}
		}
		if err != nil {
			return
		}
	}
}

// closeLinks cuts the connections through the proxy: all of them, or those a partition cut.
func (p *Proxy) closeLinks(cutOnly bool) {
	p.mu.Lock()
	var links []*link
	for l := range p.links {
		if l.cut || !cutOnly {
			links = append(links, l)
		}
	}
	p.mu.Unlock()
	for _, l := range links {
		l.close()
	}
}

// Repoint sends new connections to upstream instead, as a virtual IP moved to a new primary
// does: the connections through it are cut, and the port stays the same.
func (p *Proxy) Repoint(upstream string) error {
	p.lifecycle.Lock()
	defer p.lifecycle.Unlock()
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return errors.New("testdb: repoint a closed proxy")
	}
	p.upstream = upstream
	listener := p.listener
	p.mu.Unlock()
	listener.Close()
	p.accepting.Wait()
	p.closeLinks(false)
	if err := p.listen(net.JoinHostPort("127.0.0.1", strconv.Itoa(p.Port))); err != nil {
		return fmt.Errorf("repoint the proxy to %s: %w", upstream, err)
	}
	return nil
}

// Close stops the proxy and cuts every connection through it. Closing it again does nothing.
func (p *Proxy) Close() {
	p.lifecycle.Lock()
	defer p.lifecycle.Unlock()
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return
	}
	p.closed = true
	listener := p.listener
	p.mu.Unlock()
	listener.Close()
	p.accepting.Wait()
	p.closeLinks(false)
	p.pumping.Wait()
}

// Partition stops all traffic, both ways, without closing anything: the server sees its
// sessions go quiet, the client sees its reads and writes hang (what was sent is dropped, on
// the connections made during the partition too). heal ends it: the connections that were cut
// off are closed, as a client's and a server's TCP stacks would eventually close them, and new
// ones pass.
func (p *Proxy) Partition() (heal func() error, err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.partitioned {
		return nil, errors.New("testdb: the proxy is already partitioned")
	}
	p.partitioned = true
	for l := range p.links {
		l.cut = true
	}
	return func() error {
		p.mu.Lock()
		p.partitioned = false
		p.mu.Unlock()
		p.closeLinks(true)
		return nil
	}, nil
}

// Slow delays traffic both ways by latency, give or take jitter (milliseconds), each chunk from
// its arrival. undo takes the delay away from what arrives after it.
func (p *Proxy) Slow(latencyMS, jitterMS int) (undo func() error, err error) {
	if latencyMS < 0 || jitterMS < 0 || jitterMS > latencyMS {
		return nil, fmt.Errorf("testdb: latency %d ms with jitter %d ms", latencyMS, jitterMS)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.latency, p.jitter = time.Duration(latencyMS)*time.Millisecond, time.Duration(jitterMS)*time.Millisecond
	return func() error {
		p.mu.Lock()
		p.latency, p.jitter = 0, 0
		p.mu.Unlock()
		return nil
	}, nil
}

// PartitionablePool opens a pool on the database whose every connection passes through a
// Proxy; partition stops all traffic on it (Proxy.Partition), and the function it returns ends
// the partition. configure, when not nil, may change the pool's settings first.
func (d *DB) PartitionablePool(t testing.TB, configure func(*pgxpool.Config)) (pool *pgxpool.Pool, partition func() (heal func())) {
	t.Helper()
	pool, proxy := d.ProxiedPool(t, configure)
	return pool, func() func() {
		heal, err := proxy.Partition()
		if err != nil {
			t.Errorf("%v", err)
			return func() {}
		}
		return func() {
			if err := heal(); err != nil {
				t.Errorf("%v", err)
			}
		}
	}
}

// ProxiedPool opens a pool on the database whose every connection passes through the Proxy it
// returns, to partition or slow. configure, when not nil, may change the pool's settings first.
func (d *DB) ProxiedPool(t testing.TB, configure func(*pgxpool.Config)) (*pgxpool.Pool, *Proxy) {
	t.Helper()
	config, err := pgx.ParseConfig(d.url)
	if err != nil {
		t.Fatalf("testdb: %v", err)
	}
	proxy, err := NewProxy(net.JoinHostPort(config.Host, strconv.Itoa(int(config.Port))))
	if err != nil {
		t.Fatal(err)
	}
	pool := d.NewPool(t, func(c *pgxpool.Config) {
		c.ConnConfig.Host = "127.0.0.1"
		c.ConnConfig.Port = uint16(proxy.Port)
		if configure != nil {
			configure(c)
		}
	})
	// Stop the proxy before the pool closes: closing a connection stuck behind a partition
	// would otherwise wait for pgx's cancel request to time out.
	t.Cleanup(proxy.Close)
	return pool, proxy
}
