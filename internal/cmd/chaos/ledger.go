package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// A ledger is what a worker was told, written as it is told, on its own clock (the database's
// host's: everything runs on one machine): the grants, effects and ticks acknowledged to it, and
// when it was told that a lock or leadership was lost. make ha compares it with the evidence the
// new primary holds. Without a file (chaos), it writes nothing.
type ledger struct {
	worker string
	mu     sync.Mutex
	f      *os.File // each line written at once: a worker killed keeps what it was told
}

// entry is a line of a ledger.
type entry struct {
	Kind   string    `json:"kind"` // grant, lost, effect, tick
	Worker string    `json:"worker"`
	Name   string    `json:"name,omitempty"`
	Token  int64     `json:"token,omitempty"`
	Key    string    `json:"key,omitempty"`
	At     time.Time `json:"at"` // when the worker was told; for a tick, its scheduled time
}

func openLedger(path, worker string) (*ledger, error) {
	if path == "" {
		return &ledger{}, nil
	}
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	return &ledger{worker: worker, f: f}, nil
}

func (l *ledger) write(e entry) {
	if l.f == nil {
		return
	}
	e.Worker = l.worker
	line, _ := json.Marshal(e)
	l.mu.Lock()
	defer l.mu.Unlock()
	l.f.Write(append(line, '\n'))
}

func (l *ledger) granted(name string, token int64) {
	l.write(entry{Kind: "grant", Name: name, Token: token, At: time.Now()})
}
func (l *ledger) lost(name string, token int64) {
	l.write(entry{Kind: "lost", Name: name, Token: token, At: time.Now()})
}
func (l *ledger) effect(key string) { l.write(entry{Kind: "effect", Key: key, At: time.Now()}) }
func (l *ledger) tick(scheduled time.Time, token int64) {
	l.write(entry{Kind: "tick", Token: token, At: scheduled})
}

func (l *ledger) close() error {
	if l.f == nil {
		return nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.f.Close()
}

// reckoning is what the ledgers say against the evidence.
type reckoning struct {
	grants, effects, ticks, losses     int // acknowledged, and losses told
	lostGrants, lostEffects, lostTicks int // acknowledged, missing on the new primary
	grantedTwice                       int // a name's token acknowledged to two holders
	regrantedFirst                     int // a lock or leadership granted to another before its holder was told it had lost it
	latestTold                         time.Duration
}

// reckon reads every worker's ledger in dir and checks it against the evidence, in a few
// queries over the ledgers loaded into a temporary table.
func reckon(ctx context.Context, admin *pgxpool.Pool, dir string) (*reckoning, error) {
	var rows [][]any
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || filepath.Ext(path) != ".ledger" {
			return err
		}
		f, err := os.Open(path)
		if err != nil {
			return err
		}
		defer f.Close()
		scan := bufio.NewScanner(f)
		for scan.Scan() {
			var e entry
			if err := json.Unmarshal(scan.Bytes(), &e); err != nil {
				return fmt.Errorf("%s: %w", path, err)
			}
			rows = append(rows, []any{e.Kind, e.Worker, e.Name, e.Token, e.Key, e.At})
		}
		return scan.Err()
	})
	if err != nil {
		return nil, err
	}
	conn, err := admin.Acquire(ctx)
	if err != nil {
		return nil, err
	}
	defer conn.Release()
	if _, err := conn.Exec(ctx, `CREATE TEMPORARY TABLE ledger (kind text, worker text, name text, token bigint, key text, at timestamptz)`); err != nil {
		return nil, err
	}
	if _, err := conn.CopyFrom(ctx, pgx.Identifier{"ledger"}, []string{"kind", "worker", "name", "token", "key", "at"}, pgx.CopyFromRows(rows)); err != nil {
		return nil, err
	}
	var r reckoning
	var latest *time.Duration
	err = conn.QueryRow(ctx, `SELECT
			count(*) FILTER (WHERE kind = 'grant'), count(*) FILTER (WHERE kind = 'effect'),
			count(*) FILTER (WHERE kind = 'tick'), count(*) FILTER (WHERE kind = 'lost'),
			count(*) FILTER (WHERE kind = 'grant' AND NOT EXISTS (SELECT FROM chaos_grants g WHERE g.name = l.name AND g.token = l.token)),
			count(*) FILTER (WHERE kind = 'effect' AND NOT EXISTS (SELECT FROM chaos_effects e WHERE e.key = l.key AND e.worker = l.worker)),
			count(*) FILTER (WHERE kind = 'tick' AND NOT EXISTS (SELECT FROM chaos_ticks t WHERE t.tick = l.at AND t.worker = l.worker AND t.token = l.token)),
			(SELECT coalesce(sum(n - 1), 0) FROM (SELECT count(*) AS n FROM ledger WHERE kind = 'grant' GROUP BY name, token) g)
		FROM ledger l`).Scan(&r.grants, &r.effects, &r.ticks, &r.losses, &r.lostGrants, &r.lostEffects, &r.lostTicks, &r.grantedTwice)
	if err != nil {
		return nil, err
	}
	// A loss must be told before the name's next grant, by the database's clock.
	err = conn.QueryRow(ctx, `SELECT count(*), max(l.at - n.first) FROM ledger l
		CROSS JOIN LATERAL (SELECT min(g.at) AS first FROM chaos_grants g WHERE g.name = l.name AND g.token > l.token) n
		WHERE l.kind = 'lost' AND n.first < l.at`).Scan(&r.regrantedFirst, &latest)
	if latest != nil {
		r.latestTold = *latest
	}
	return &r, err
}

func (r *reckoning) line() string {
	s := fmt.Sprintf("acknowledged %d grants, %d job outcomes, %d ticks: missing on the new primary %d, %d, %d; tokens acknowledged to two holders %d; %d losses told, %d of them after the lock or leadership was granted again",
		r.grants, r.effects, r.ticks, r.lostGrants, r.lostEffects, r.lostTicks, r.grantedTwice, r.losses, r.regrantedFirst)
	if r.regrantedFirst > 0 {
		s += fmt.Sprintf(" (by up to %s)", r.latestTold.Round(time.Millisecond))
	}
	return s
}
