package testdb

import (
	"context"
	"fmt"
	"strings"
	"testing"

	toxiproxy "github.com/Shopify/toxiproxy/v2"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/rs/zerolog"
)

// PartitionablePool opens a pool on the database whose every connection passes through an
// in-process toxiproxy; partition stops all traffic on it without closing anything, as a silent
// network partition or a frozen client does: the server sees its sessions go quiet, the client
// sees its reads and writes hang. The function partition returns lets traffic through again.
// configure, when not nil, may change the pool's settings first.
func (d *DB) PartitionablePool(t testing.TB, configure func(*pgxpool.Config)) (pool *pgxpool.Pool, partition func() (heal func())) {
	t.Helper()
	config, err := pgx.ParseConfig(d.url)
	if err != nil {
		t.Fatalf("testdb: %v", err)
	}
	proxy := toxiproxy.NewProxy(toxiproxy.NewServer(toxiproxy.NewMetricsContainer(nil), zerolog.Nop()),
		"postgres", "127.0.0.1:0", fmt.Sprintf("%s:%d", config.Host, config.Port))
	if err := proxy.Start(); err != nil {
		t.Fatalf("testdb: toxiproxy: %v", err)
	}
	_, port, _ := strings.Cut(proxy.Listen, ":")
	pool = d.NewPool(t, func(c *pgxpool.Config) {
		c.ConnConfig.Host = "127.0.0.1"
		fmt.Sscan(port, &c.ConnConfig.Port)
		if configure != nil {
			configure(c)
		}
	})
	// Stop the proxy before the pool closes: closing a connection stuck behind the partition
	// would otherwise wait for pgx's cancel request to time out.
	t.Cleanup(proxy.Stop)
	streams := []string{"upstream", "downstream"}
	return pool, func() func() {
		for _, stream := range streams {
			_, err := proxy.Toxics.AddToxicJson(strings.NewReader(
				`{"name": "partition_` + stream + `", "type": "timeout", "stream": "` + stream + `", "attributes": {"timeout": 0}}`))
			if err != nil {
				t.Errorf("testdb: partition: %v", err)
			}
		}
		return func() {
			for _, stream := range streams {
				if err := proxy.Toxics.RemoveToxic(context.Background(), "partition_"+stream); err != nil {
					t.Errorf("testdb: heal the partition: %v", err)
				}
			}
		}
	}
}
