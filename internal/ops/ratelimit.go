package ops

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pglock/pglock"
	"github.com/pglock/pglock/internal/db"
)

// RateKey is a rate-limit key and when it is next free: from Tat on it is as fresh as a new
// key (a decision before then finds part of its budget spent).
type RateKey struct {
	Durable bool // in the logged table; else the unlogged one
	Key     string
	Tat     time.Time
}

// RateKeys is a page of rate-limit keys, as of Now by the database's clock.
type RateKeys struct {
	Now  time.Time
	Keys []RateKey
	More bool
}

// RateFilter selects rate-limit keys; every zero field selects all.
type RateFilter struct {
	Contains string // keys containing this
	// AfterDurable and AfterKey start the page after that key, HasAfter saying so.
	AfterDurable bool
	AfterKey     string
	HasAfter     bool
	Limit        int // default 100
}

// ListRateLimits reads the keys f selects, in (durable, key) order.
func ListRateLimits(ctx context.Context, pool *pgxpool.Pool, f RateFilter) (RateKeys, error) {
	if f.Limit == 0 {
		f.Limit = 100
	}
	if f.Limit < 1 || f.Limit > 1_000_000 || strings.ContainsRune(f.Contains+f.AfterKey, 0) {
		return RateKeys{}, fmt.Errorf("%w: a limit from 1 to 1000000, and filters without NUL", pglock.ErrInvalidArgument)
	}
	params := db.ListRateLimitsParams{MaxRows: int32(f.Limit + 1)}
	if f.Contains != "" {
		params.KeyLike = containsPattern(f.Contains)
	}
	if f.HasAfter {
		params.AfterDurable, params.AfterKey = &f.AfterDurable, &f.AfterKey
	}
	rows, err := db.New(db.Translating(pool)).ListRateLimits(ctx, params)
	if err != nil {
		return RateKeys{}, err
	}
	out := RateKeys{Keys: make([]RateKey, 0, len(rows))}
	if len(rows) > f.Limit {
		rows, out.More = rows[:f.Limit], true
	}
	for _, r := range rows {
		out.Now = r.Now
		out.Keys = append(out.Keys, RateKey{Durable: r.Durable, Key: r.RateKey, Tat: r.Tat})
	}
	if out.Now.IsZero() {
		if out.Now, err = DatabaseNow(ctx, pool); err != nil {
			return RateKeys{}, err
		}
	}
	return out, nil
}
