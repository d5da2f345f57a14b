package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
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
	mu  sync.Mutex
	out *bufio.Writer
	f   *os.File
}

// entry is a line of a ledger.
type entry struct {
	Kind  string    `json:"kind"` // grant, lost, effect, tick
	Name  string    `json:"name,omitempty"`
	Token int64     `json:"token,omitempty"`
	Key   string    `json:"key,omitempty"`
	At    time.Time `json:"at"` // when the worker was told; for a tick, its scheduled time
}

func openLedger(path string) (*ledger, error) {
	if path == "" {
		return &ledger{}, nil
	}
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	return &ledger{f: f, out: bufio.NewWriter(f)}, nil
}

func (l *ledger) write(e entry) {
	if l.f == nil {
		return
	}
	line, _ := json.Marshal(e)
	l.mu.Lock()
	defer l.mu.Unlock()
	l.out.Write(append(line, '\n'))
}

func (l *ledger) granted(name string, token int64) {
	l.write(entry{Kind: "grant", Name: name, Token: token, At: time.Now()})
}
func (l *ledger) lost(name string, token int64) {
	l.write(entry{Kind: "lost", Name: name, Token: token, At: time.Now()})
}
func (l *ledger) effect(key string)        { l.write(entry{Kind: "effect", Key: key, At: time.Now()}) }
func (l *ledger) tick(scheduled time.Time) { l.write(entry{Kind: "tick", At: scheduled}) }

func (l *ledger) close() error {
	if l.f == nil {
		return nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return errors.Join(l.out.Flush(), l.f.Close())
}

// reckoning is what the ledgers say against the evidence.
type reckoning struct {
	grants, effects, ticks, losses     int // acknowledged, and losses told
	lostGrants, lostEffects, lostTicks int // acknowledged, missing on the new primary
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
	for _, e := range entries {
		var found bool
		switch e.Kind {
		case "grant":
			r.grants++
			err = admin.QueryRow(ctx, `SELECT EXISTS (SELECT FROM chaos_grants WHERE name = $1 AND token = $2)`, e.Name, e.Token).Scan(&found)
			if err == nil && !found {
				r.lostGrants++
			}
		case "effect":
			r.effects++
			err = admin.QueryRow(ctx, `SELECT EXISTS (SELECT FROM chaos_effects WHERE key = $1)`, e.Key).Scan(&found)
			if err == nil && !found {
				r.lostEffects++
			}
		case "tick":
			r.ticks++
			err = admin.QueryRow(ctx, `SELECT EXISTS (SELECT FROM chaos_ticks WHERE tick = $1)`, e.At).Scan(&found)
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
	s := fmt.Sprintf("acknowledged %d grants, %d job outcomes, %d ticks: missing on the new primary %d, %d, %d; %d losses told, %d of them after the lock or leadership was granted again",
		r.grants, r.effects, r.ticks, r.lostGrants, r.lostEffects, r.lostTicks, r.losses, r.regrantedFirst)
	if r.regrantedFirst > 0 {
		s += fmt.Sprintf(" (by up to %s)", r.latestTold.Round(time.Millisecond))
	}
	return s
}
