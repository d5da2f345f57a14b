package ops

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pglock/pglock"
	"github.com/pglock/pglock/internal/db"
	"github.com/pglock/pglock/jobs"
)

// JobRecord is a job's record as operators see it; the JSON field names are pglockctl jobs',
// stable (see docs/pglockctl.md).
type JobRecord struct {
	Scope          string          `json:"scope"`
	Key            string          `json:"key"`
	Status         string          `json:"status"`
	Holder         string          `json:"holder"`
	Instance       string          `json:"instance"`
	Attempts       int32           `json:"attempts"`
	Token          int64           `json:"token"`
	LeaseExpiresAt *time.Time      `json:"lease_expires_at"`
	StartedAt      time.Time       `json:"started_at"`
	FinishedAt     *time.Time      `json:"finished_at"`
	LastError      *string         `json:"last_error"`
	Result         json.RawMessage `json:"result"`
	Fingerprint    *string         `json:"fingerprint"`
	RetainUntil    time.Time       `json:"retain_until"`
	CreatedAt      time.Time       `json:"created_at"`
}

func recordOf(j db.PglockJob) JobRecord {
	return JobRecord{
		Scope: j.Scope, Key: j.JobKey, Status: j.Status, Holder: j.HolderID, Instance: j.Instance,
		Attempts: j.Attempts, Token: j.FencingToken, LeaseExpiresAt: j.LeaseExpiresAt, StartedAt: j.StartedAt,
		FinishedAt: j.FinishedAt, LastError: j.LastError, Result: j.Result, Fingerprint: j.Fingerprint,
		RetainUntil: j.RetainUntil, CreatedAt: j.CreatedAt,
	}
}

// JobFilter selects job records: each zero field selects all.
type JobFilter struct {
	Scope    string
	AnyScope bool   // Scope "" is a scope like any other: AnyScope says Scope is no filter
	Status   string // running, succeeded or failed
	KeyGlob  string // * any text, ? one character
	// AfterScope and AfterKey start the page after that record (keyset pagination); set both
	// or neither, HasAfter saying which.
	AfterScope, AfterKey string
	HasAfter             bool
	Limit                int // 1 to 1,000,000; default 100
}

// Jobs is a page of records, as of Now by the database's clock.
type Jobs struct {
	Now     time.Time
	Records []JobRecord
	More    bool // there are records after the last
}

// ListJobs reads the records f selects, in (scope, key) order.
func ListJobs(ctx context.Context, pool *pgxpool.Pool, f JobFilter) (Jobs, error) {
	if f.Limit == 0 {
		f.Limit = 100
	}
	switch {
	case f.Status != "" && f.Status != string(jobs.StatusRunning) && f.Status != string(jobs.StatusSucceeded) && f.Status != string(jobs.StatusFailed):
		return Jobs{}, fmt.Errorf("%w: status must be running, succeeded or failed, not %q", pglock.ErrInvalidArgument, f.Status)
	case f.Limit < 1 || f.Limit > 1_000_000:
		return Jobs{}, fmt.Errorf("%w: limit %d must be from 1 to 1000000", pglock.ErrInvalidArgument, f.Limit)
	case strings.ContainsRune(f.KeyGlob+f.Scope+f.AfterScope+f.AfterKey, 0):
		return Jobs{}, fmt.Errorf("%w: a filter holds a NUL character", pglock.ErrInvalidArgument)
	}
	params := db.ListJobsParams{MaxRows: int32(f.Limit + 1), KeyLike: LikePattern(f.KeyGlob)}
	if f.Status != "" {
		params.Status = &f.Status
	}
	if !f.AnyScope {
		params.Scope = &f.Scope
	}
	if f.HasAfter {
		params.AfterScope, params.AfterKey = &f.AfterScope, &f.AfterKey
	}
	rows, err := db.New(db.Translating(pool)).ListJobs(ctx, params)
	if err != nil {
		return Jobs{}, err
	}
	out := Jobs{Records: make([]JobRecord, 0, len(rows))}
	if len(rows) > f.Limit {
		rows, out.More = rows[:f.Limit], true
	}
	for _, r := range rows {
		out.Now = r.Now
		out.Records = append(out.Records, recordOf(r.PglockJob))
	}
	if out.Now.IsZero() {
		if out.Now, err = DatabaseNow(ctx, pool); err != nil {
			return Jobs{}, err
		}
	}
	return out, nil
}

// GetJob reads key's record in scope, and the database's now; pglock.ErrNotFound if none.
func GetJob(ctx context.Context, pool *pgxpool.Pool, scope, key string) (JobRecord, time.Time, error) {
	if key == "" || strings.ContainsRune(scope+key, 0) {
		return JobRecord{}, time.Time{}, fmt.Errorf("%w: a job key is 1 or more characters without NUL", pglock.ErrInvalidArgument)
	}
	row, err := db.New(db.Translating(pool)).GetJob(ctx, db.GetJobParams{Scope: scope, JobKey: key})
	if errors.Is(err, pgx.ErrNoRows) {
		return JobRecord{}, time.Time{}, fmt.Errorf("%w: no record of job %q in scope %q", pglock.ErrNotFound, key, scope)
	}
	if err != nil {
		return JobRecord{}, time.Time{}, err
	}
	return recordOf(row.PglockJob), row.Now, nil
}

// LikePattern turns a glob (* any text, ? one character) into a LIKE pattern; nil for "*" and "".
func LikePattern(glob string) *string {
	if glob == "*" || glob == "" {
		return nil
	}
	pattern := globWildcards.Replace(likeEscaper.Replace(glob))
	return &pattern
}

// globWildcards maps a glob's wildcards, which likeEscaper leaves alone, to LIKE's.
var globWildcards = strings.NewReplacer("*", "%", "?", "_")

// DatabaseNow reads the database's clock.
func DatabaseNow(ctx context.Context, pool *pgxpool.Pool) (time.Time, error) {
	return db.New(db.Translating(pool)).DatabaseNow(ctx)
}

// Debounced is a debounced key as operators see it: its pending cycle, if any, and its run under
// way, if any.
type Debounced struct {
	Scope          string          `json:"scope"`
	Key            string          `json:"key"`
	Deliveries     int32           `json:"deliveries"` // pending
	FirstAt        *time.Time      `json:"first_at"`
	DueAt          *time.Time      `json:"due_at"`
	Payload        json.RawMessage `json:"payload"`
	RunToken       *int64          `json:"run_token"`
	RunAttempt     *int32          `json:"run_attempt"`
	RunInstance    *string         `json:"run_instance"`
	RunDeliveries  *int32          `json:"run_deliveries"`
	LeaseExpiresAt *time.Time      `json:"lease_expires_at"`
	LastError      *string         `json:"last_error"`
}

// ListDebounced reads up to limit debounced keys of scope (every scope's with anyScope), the
// earliest ready first.
func ListDebounced(ctx context.Context, pool *pgxpool.Pool, scope string, anyScope bool, limit int) ([]Debounced, error) {
	params := db.ListDebouncedParams{MaxRows: int32(limit)}
	if !anyScope {
		params.Scope = &scope
	}
	rows, err := db.New(db.Translating(pool)).ListDebounced(ctx, params)
	if err != nil {
		return nil, err
	}
	out := make([]Debounced, 0, len(rows))
	for _, r := range rows {
		d := r.PglockJobDebounce
		out = append(out, Debounced{Scope: d.Scope, Key: d.JobKey, Deliveries: d.Deliveries, FirstAt: d.FirstAt, DueAt: d.DueAt,
			Payload: d.Payload, RunToken: d.RunToken, RunAttempt: d.RunAttempts, RunInstance: d.RunInstance,
			RunDeliveries: d.RunDeliveries, LeaseExpiresAt: d.LeaseExpiresAt, LastError: d.LastError})
	}
	return out, nil
}
