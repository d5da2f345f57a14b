package jobs

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pglock/pglock"
	"github.com/pglock/pglock/internal/db"
	"github.com/pglock/pglock/internal/errs"
	"github.com/pglock/pglock/internal/ident"
)

// MaxBatch is the most keys RunTxBatch delivers at once.
const MaxBatch = 1000

// Delivered is what RunTxBatch found or did for one key.
type Delivered struct {
	Key string
	Result
	// Err is why the key may not run, when it may not: it matches [pglock.ErrGaveUp].
	Err error
}

// RunTxBatch is RunTx for many keys of one scope at once: it begins a transaction and claims
// every key in the same round trip, runs fn once with the keys it claimed (in the order given),
// and commits their outcomes with fn's writes in the round trip of the COMMIT. Each of the other
// keys is answered from its record, as RunTx answers a duplicate (OutcomeAlreadyDone,
// OutcomeInProgress, or Err when it gave up), and fn does not see it; with none claimed, fn is
// not called. The batch holds only the keys it claimed while fn runs. If fn fails (or the server
// refuses the COMMIT), none of its writes commit, and every key it was given records the failure,
// as RunTx records one; if the connection ends first, nothing is recorded, and the keys run again
// at their next delivery. An Observer is told of a run per key claimed; fn's context is the
// first's.
//
// The keys are 1 to MaxBatch distinct keys. opts apply to every key; Options.Wait and
// Options.Fingerprint, which are one delivery's, are refused. Bad input is an error matching
// [pglock.ErrInvalidArgument], with nothing written. The result has a Delivered per key, in the
// order given, whenever the claim got through.
func (d *Deduper) RunTxBatch(ctx context.Context, keys []string, opts *Options, fn func(ctx context.Context, tx pgx.Tx, claimed []string) error) (delivered []Delivered, err error) {
	reqs, err := d.newBatch(keys, opts, fn == nil)
	if err != nil {
		return nil, err
	}
	if d.events != nil {
		err = errPanicked // what a panic in fn leaves: a failed run of every key claimed
		defer func() {
			for i, req := range reqs {
				e, keyErr := Delivered{}, err // the claim failed: every key's delivery with it
				if delivered != nil {
					if e, keyErr = delivered[i], delivered[i].Err; e.Outcome == OutcomeRan {
						keyErr = err
					}
				}
				d.delivered(ctx, req, pglock.ModeRunTx, e.Result, keyErr)
			}
		}()
	}
	err = d.attemptBatch(ctx, reqs, fn, &delivered)
	return delivered, err
}

// newBatch checks a batch's keys and options, with errors matching [pglock.ErrInvalidArgument].
func (d *Deduper) newBatch(keys []string, opts *Options, nilFn bool) ([]request, error) {
	switch {
	case nilFn:
		return nil, errs.Errorf("%w: nil fn", pglock.ErrInvalidArgument)
	case len(keys) == 0:
		return nil, errs.Errorf("%w: a batch of no keys", pglock.ErrInvalidArgument)
	case len(keys) > MaxBatch:
		return nil, errs.Errorf("%w: a batch of %d keys, the limit is %d", pglock.ErrInvalidArgument, len(keys), MaxBatch)
	case opts != nil && opts.Wait:
		return nil, errs.Errorf("%w: Options.Wait: a batch answers a key in progress, it does not wait", pglock.ErrInvalidArgument)
	case opts != nil && opts.Fingerprint != "":
		return nil, errs.Errorf("%w: Options.Fingerprint is one payload's, not a batch's", pglock.ErrInvalidArgument)
	case opts != nil && opts.Mode != OncePerWindow:
		return nil, errs.Errorf("%w: Options.Mode %s: a batch delivers in the default mode, OncePerWindow", pglock.ErrInvalidArgument, opts.Mode)
	}
	// The options are checked once, with the first key; every key is a request like it.
	first, err := d.newRequest(keys[0], opts)
	if err != nil {
		return nil, err
	}
	reqs := make([]request, len(keys))
	seen := make(map[string]struct{}, len(keys))
	for i, key := range keys {
		if _, twice := seen[key]; twice {
			return nil, errs.Errorf("%w: job key %.80q given twice in a batch", pglock.ErrInvalidArgument, key)
		}
		seen[key] = struct{}{}
		if err := checkKey(key); err != nil {
			return nil, err
		}
		reqs[i] = first
		reqs[i].key = key
	}
	return reqs, nil
}

// attemptBatch claims the batch's keys and, if any was claimed, runs fn with them in the
// claim's transaction. It sets *delivered to what each key found or did once the claim is
// answered (before fn runs, for an Observer told of a panic in fn).
func (d *Deduper) attemptBatch(ctx context.Context, reqs []request, fn func(ctx context.Context, tx pgx.Tx, claimed []string) error, delivered *[]Delivered) error {
	first := reqs[0]
	p := db.ClaimJobsTxParams{
		Scope: first.scope, JobKeys: make([]string, len(reqs)), HolderID: ident.NewHolderID(), Instance: d.instance,
		WindowMs: first.window.Milliseconds(), MaxAttempts: first.maxAttempts, IdleTimeoutMs: max(0, d.cfg.TxIdleTimeout.Milliseconds()),
	}
	for i, req := range reqs {
		p.JobKeys[i] = req.key
	}
	var (
		rows    []db.ClaimJobsTxRow
		claimed []int
		keys    []string // fn's
		tokens  []int64
	)
	run := &pgxRun{pool: d.pool, fn: func(ctx context.Context, tx pgx.Tx) error { return fn(ctx, tx, keys) }}
	defer run.close()
	err := run.begin(ctx, func(q *db.Queries) (err error) {
		rows, err = q.ClaimJobsTx(ctx, p)
		return err
	})
	if err == nil && len(rows) != len(reqs) {
		err = errs.Errorf("%d answers for %d keys", len(rows), len(reqs))
	}
	if err != nil {
		run.rollback(ctx)
		return errs.Errorf("claim a batch of %d keys: %w", len(reqs), err)
	}
	answers := make([]Delivered, len(reqs))
	*delivered = answers
	for i, row := range rows {
		res, err := reqs[i].answer(db.ClaimJobRow(row)) // the same columns
		answers[i] = Delivered{Key: reqs[i].key, Result: res, Err: err}
		if err == nil && res.Outcome == OutcomeRan {
			claimed = append(claimed, i)
			keys, tokens = append(keys, reqs[i].key), append(tokens, res.Token)
		}
	}
	if len(claimed) == 0 {
		run.rollback(ctx) // nothing was written
		return nil
	}

	// The Observer begins a run of every key claimed; fn's context is the first's (a span's).
	fnCtx := ctx
	ends := make([]func(error), len(claimed))
	for n, i := range claimed {
		var runCtx context.Context
		runCtx, ends[n] = d.beginRun(ctx, reqs[i], pglock.ModeRunTx, answers[i].Result)
		if n == 0 {
			fnCtx = runCtx
		}
	}
	ran := func(err error) {
		for _, end := range ends {
			end(err)
		}
	}
	// Every key fn was given failed with it; a record that fails stays the key's next delivery's.
	record := func(outcome error) error {
		var failed []error
		for _, i := range claimed {
			failed = append(failed, d.recordOutcome(ctx, reqs[i], outcome))
		}
		return errors.Join(failed...)
	}
	_, fnErr := callRecovering(func() (struct{}, error) { return struct{}{}, run.call(fnCtx) }, func(panicked error) {
		ran(panicked)
		run.rollback(ctx)
		record(panicked)
	})
	ran(fnErr)
	label := fmt.Sprintf("a batch of %d keys", len(claimed))
	if first.scope != "" {
		label += fmt.Sprintf(" in scope %q", first.scope)
	}
	finishedAt, err := d.endTx(ctx, run, fnErr, label, func(ctx context.Context, q *db.Queries) (time.Time, error) {
		return q.FinishJobsTx(ctx, db.FinishJobsTxParams{Scope: first.scope, JobKeys: keys, FencingTokens: tokens, WindowMs: first.window.Milliseconds()})
	}, record)
	for _, i := range claimed {
		answers[i].FinishedAt = finishedAt
	}
	return err
}
