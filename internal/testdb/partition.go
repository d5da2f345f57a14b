package testdb

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"

	toxiproxy "github.com/Shopify/toxiproxy/v2"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/rs/zerolog"
)

// Proxy is an in-process toxiproxy in front of a PostgreSQL server: what passes through it
// can be cut off or slowed down without closing anything, as a network would.
type Proxy struct {
	proxy  *toxiproxy.Proxy
	Port   int // the loopback port it listens on
	closed sync.Once
}

// NewProxy starts a proxy to upstream (host:port) on a free loopback port.
func NewProxy(upstream string) (*Proxy, error) {
	proxy := toxiproxy.NewProxy(toxiproxy.NewServer(toxiproxy.NewMetricsContainer(nil), zerolog.Nop()),
		"postgres", "127.0.0.1:0", upstream)
	if err := proxy.Start(); err != nil {
		return nil, fmt.Errorf("testdb: toxiproxy: %w", err)
	}
	_, port, _ := strings.Cut(proxy.Listen, ":")
	p := &Proxy{proxy: proxy}
	p.Port, _ = strconv.Atoi(port)
	return p, nil
}

// Repoint sends new connections to upstream instead, as a virtual IP moved to a new primary
// does: the connections through it are cut, and the port stays the same.
func (p *Proxy) Repoint(upstream string) error {
	p.proxy.Stop()
	p.proxy.Listen = fmt.Sprintf("127.0.0.1:%d", p.Port)
	p.proxy.Upstream = upstream
	if err := p.proxy.Start(); err != nil {
		return fmt.Errorf("testdb: repoint the proxy to %s: %w", upstream, err)
	}
	return nil
}

// Close stops the proxy and cuts every connection through it. Closing it again does nothing.
func (p *Proxy) Close() { p.closed.Do(p.proxy.Stop) }

// Partition stops all traffic, both ways, without closing anything: the server sees its
// sessions go quiet, the client sees its reads and writes hang (what was sent is dropped).
// heal ends it: the connections that were cut off are closed (toxiproxy closes them as it
// removes the toxic), and new ones pass.
func (p *Proxy) Partition() (heal func() error, err error) {
	return p.toxics("partition", `"type": "timeout", "attributes": {"timeout": 0}`)
}

// Slow delays traffic both ways by latency, give or take jitter (milliseconds).
// undo takes the delay away.
func (p *Proxy) Slow(latencyMS, jitterMS int) (undo func() error, err error) {
	return p.toxics("latency", fmt.Sprintf(`"type": "latency", "attributes": {"latency": %d, "jitter": %d}`, latencyMS, jitterMS))
}

// toxics adds a toxic of body to both streams, named after name.
func (p *Proxy) toxics(name, body string) (func() error, error) {
	var added []string
	remove := func() error {
		var first error
		for _, toxic := range added {
			if err := p.proxy.Toxics.RemoveToxic(context.Background(), toxic); err != nil && first == nil {
				first = fmt.Errorf("testdb: remove toxic %s: %w", toxic, err)
			}
		}
		return first
	}
	for _, stream := range []string{"upstream", "downstream"} {
		toxic := name + "_" + stream
		if _, err := p.proxy.Toxics.AddToxicJson(strings.NewReader(
			`{"name": "` + toxic + `", "stream": "` + stream + `", ` + body + `}`)); err != nil {
			remove()
			return nil, fmt.Errorf("testdb: toxic %s: %w", toxic, err)
		}
		added = append(added, toxic)
	}
	return remove, nil
}

// PartitionablePool opens a pool on the database whose every connection passes through a
// Proxy; partition stops all traffic on it (Proxy.Partition), and the function it returns ends
// the partition. configure, when not nil, may change the pool's settings first.
func (d *DB) PartitionablePool(t testing.TB, configure func(*pgxpool.Config)) (pool *pgxpool.Pool, partition func() (heal func())) {
	t.Helper()
	config, err := pgx.ParseConfig(d.url)
	if err != nil {
		t.Fatalf("testdb: %v", err)
	}
	proxy, err := NewProxy(fmt.Sprintf("%s:%d", config.Host, config.Port))
	if err != nil {
		t.Fatal(err)
	}
	pool = d.NewPool(t, func(c *pgxpool.Config) {
		c.ConnConfig.Host = "127.0.0.1"
		c.ConnConfig.Port = uint16(proxy.Port)
		if configure != nil {
			configure(c)
		}
	})
	// Stop the proxy before the pool closes: closing a connection stuck behind the partition
	// would otherwise wait for pgx's cancel request to time out.
	t.Cleanup(proxy.Close)
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
