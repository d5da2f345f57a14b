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

// reckon reads every worker's ledger in dir and checks it against the evidence.
func reckon(ctx context.Context, admin *pgxpool.Pool, dir string) (*reckoning, error) {
	var r reckoning
	var entries []entry
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
			entries = append(entries, e)
		}
		return scan.Err()
	})
	if err != nil {
		return nil, err
	}
	type grant struct {
		name  string
		token int64
	}
	seen := map[grant]bool{}
	for _, e := range entries {
		var found bool
		switch e.Kind {
		case "grant":
			r.grants++
			if seen[grant{e.Name, e.Token}] {
				r.grantedTwice++
			}
			seen[grant{e.Name, e.Token}] = true
			err = admin.QueryRow(ctx, `SELECT EXISTS (SELECT FROM chaos_grants WHERE name = $1 AND token = $2)`, e.Name, e.Token).Scan(&found)
			if err == nil && !found {
				r.lostGrants++
			}
		case "effect":
			r.effects++
			err = admin.QueryRow(ctx, `SELECT EXISTS (SELECT FROM chaos_effects WHERE key = $1 AND worker = $2)`, e.Key, e.Worker).Scan(&found)
			if err == nil && !found {
				r.lostEffects++
			}
		case "tick":
			r.ticks++
			err = admin.QueryRow(ctx, `SELECT EXISTS (SELECT FROM chaos_ticks WHERE tick = $1 AND worker = $2 AND token = $3)`, e.At, e.Worker, e.Token).Scan(&found)
			if err == nil && !found {
				r.lostTicks++
			}
		case "lost":
			r.losses++
			// The next grant of the name, by the database's clock: it must come after the holder
			// was told.
			var next *time.Time
			err = admin.QueryRow(ctx, `SELECT min(at) FROM chaos_grants WHERE name = $1 AND token > $2`, e.Name, e.Token).Scan(&next)
			if err == nil && next != nil && next.Before(e.At) {
				r.regrantedFirst++
				r.latestTold = max(r.latestTold, e.At.Sub(*next))
			}
		}
		if err != nil {
			return nil, err
		}
	}
	return &r, nil
}

func (r *reckoning) line() string {
	s := fmt.Sprintf("acknowledged %d grants, %d job outcomes, %d ticks: missing on the new primary %d, %d, %d; tokens acknowledged to two holders %d; %d losses told, %d of them after the lock or leadership was granted again",
		r.grants, r.effects, r.ticks, r.lostGrants, r.lostEffects, r.lostTicks, r.grantedTwice, r.losses, r.regrantedFirst)
	if r.regrantedFirst > 0 {
		s += fmt.Sprintf(" (by up to %s)", r.latestTold.Round(time.Millisecond))
	}
	return s
}
