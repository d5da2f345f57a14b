package jobs

import (
	"context"
	"errors"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pglock/pglock"
	"github.com/pglock/pglock/internal/db"
	"github.com/pglock/pglock/internal/errs"
	"github.com/pglock/pglock/internal/ident"
)

// RunTx delivers key for an effect in this database: unless it succeeded before or runs
// elsewhere, it begins a transaction, claims the key in it, runs fn with it, and commits the
// outcome with fn's writes. If fn returns an error (or leaves the transaction aborted), its
// writes are rolled back and the failure is recorded, so the next delivery retries; if the
// transaction never commits (a crash, a killed connection), no outcome is recorded either, and
// the next delivery runs it. fn must neither commit nor roll back the transaction.
//
// Round trips: BEGIN with the claim, fn's own, and the outcome with COMMIT. The transaction's idle
// time is bounded by Config.TxIdleTimeout, and so is the wait for the COMMIT's answer: past it,
// the outcome is reported unknown. A duplicate delivery of a key whose RunTx has not committed
// yet gets OutcomeInProgress at once (or, with Options.Wait, waits for its outcome). An attempt whose
// connection dies before COMMIT leaves no trace: it does not count towards MaxAttempts.
func (d *Deduper) RunTx(ctx context.Context, key string, opts *Options, fn func(ctx context.Context, tx pgx.Tx) error) (Result, error) {
	if fn == nil {
		return Result{}, errs.Errorf("%w: nil fn", pglock.ErrInvalidArgument)
	}
	req, err := d.newRequest(key, opts)
	if err != nil {
		return Result{}, err
	}
	return d.deliver(ctx, req, pglock.ModeRunTx, func(ctx context.Context, req request) (Result, int64, error) {
		return d.attemptTx(ctx, req, fn)
	})
}

func (d *Deduper) attemptTx(ctx context.Context, req request, fn func(ctx context.Context, tx pgx.Tx) error) (res Result, lockKey int64, err error) {
	conn, err := d.pool.Acquire(ctx)
	if err != nil {
		return Result{}, 0, errs.Errorf("claim %s: %w", req.label(), db.Translate(err))
	}
	// The connection goes back to the pool idle, or is closed: pgxpool closes one still in a
	// transaction. A transaction that commits ends with the COMMIT pipelined after the
	// announcement, not through tx.Commit, which would cost a round trip of its own.
	defer conn.Release()
	// BEGIN goes with the claim, in one round trip. The claim writes nothing yet for a key without
	// a record: the outcome, succeeded, is written by FinishJobTx just before COMMIT, so that
	// committing the transaction commits it with fn's writes, and rolling it back leaves the key
	// to the next delivery.
	begin := db.Begin(conn.Conn())
	claimed, err := db.New(db.Translating(begin)).ClaimJobTx(ctx, db.ClaimJobTxParams{
		Scope: req.scope, JobKey: req.key, HolderID: ident.NewHolderID(), Instance: d.instance, Fingerprint: req.fingerprint,
		WindowMs: req.window.Milliseconds(), MaxAttempts: req.maxAttempts, IdleTimeoutMs: max(0, d.cfg.TxIdleTimeout.Milliseconds())})
	a := db.ClaimJobRow(claimed) // the same columns
	tx := begin.Tx()
	// Bounded: on a connection that stopped answering, a rollback would wait for TCP to give up.
	// pgx closes a connection whose rollback fails, and the server then rolls back.
	rollback := func() {
		rollbackCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
		defer cancel()
		tx.Rollback(rollbackCtx)
	}
	if err != nil {
		rollback()
		return Result{}, 0, errs.Errorf("claim %s: %w", req.label(), err)
	}
	res, err = req.answer(a)
	if err != nil || res.Outcome != OutcomeRan {
		rollback() // nothing was written: no WAL to flush
		return res, db.Deref(a.LockKey), err
	}

	runCtx, ran := d.beginRun(ctx, req, pglock.ModeRunTx, res)
	watched := &endWatch{Tx: tx}
	_, fnErr := callRecovering(func() (struct{}, error) { return struct{}{}, fn(runCtx, watched) }, func(panicked error) {
		ran(panicked)
		rollback()
		d.recordOutcome(ctx, req, panicked)
	})
	ran(fnErr)
	switch conn.Conn().PgConn().TxStatus() {
	case 'I':
		// fn ended the transaction, and with it the claim, which only FinishJobTx writes. Its
		// outcome is recorded now, after the fact (unless a redelivery claimed the key in
		// between): what fn said if it committed through tx.Commit, else a failure, for its
		// writes may be gone.
		outcome := fnErr
		if !watched.committed && outcome == nil {
			outcome = errs.Errorf("fn ended the transaction of %s itself, not with tx.Commit", req.label())
		}
		as := "succeeded"
		if outcome != nil {
			as = "failed"
		}
		misuse := errs.Errorf("%w: fn ended the transaction of %s itself; its outcome was recorded after the fact, as %s",
			pglock.ErrInvalidArgument, req.label(), as)
		return res, 0, errors.Join(fnErr, misuse, d.recordOutcome(ctx, req, outcome))
	case 'E':
		if fnErr == nil {
			fnErr = errs.Errorf("fn returned no error but left the transaction of %s aborted", req.label())
		}
	}
	if fnErr != nil {
		rollback()
		return res, 0, errors.Join(fnErr, d.recordOutcome(ctx, req, fnErr))
	}

	// Past TxIdleTimeout a session that heard nothing has been ended, and its transaction with it.
	commitCtx, cancel := ctx, context.CancelFunc(func() {})
	if d.cfg.TxIdleTimeout > 0 {
		commitCtx, cancel = context.WithTimeout(ctx, d.cfg.TxIdleTimeout)
	}
	defer cancel()
	finishedAt, err := db.New(db.Translating(db.Around(tx, nil, []string{"COMMIT"}))).FinishJobTx(commitCtx,
		db.FinishJobTxParams{Scope: req.scope, JobKey: req.key, FencingToken: res.Token, WindowMs: req.window.Milliseconds()})
	var pgErr *pgconn.PgError
	switch {
	case errors.As(err, &pgErr):
		// The server refused the statement or the COMMIT (a deferred constraint, a
		// serialization failure): nothing was committed.
		rollback()
		err = errs.Errorf("commit %s: %w", req.label(), err)
		return res, 0, errors.Join(err, d.recordOutcome(ctx, req, err))
	case err != nil:
		rollback()
		// The commit may have happened with the connection lost on the way back: the next
		// delivery finds out.
		return res, 0, errs.Errorf("commit %s (the outcome is unknown: a redelivery runs it again unless it committed): %w",
			req.label(), err)
	}
	res.FinishedAt = finishedAt
	return res, 0, nil
}

// recordOutcome records the outcome of a RunTx attempt whose transaction did not: its failure
// (fnErr) after the transaction rolled back, so that it counts towards MaxAttempts and shows its
// error; its success when fn committed the transaction itself. Unless another delivery claimed
// the key meanwhile. An error says the outcome was not recorded.
func (d *Deduper) recordOutcome(ctx context.Context, req request, fnErr error) error {
	p := finishParams(req, 0, nil, fnErr)
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
	defer cancel()
	_, err := d.queries.RecordJobOutcome(ctx, db.RecordJobOutcomeParams{
		Scope: req.scope, JobKey: req.key, Succeeded: p.Succeeded, Error: p.Error, WindowMs: p.WindowMs, HolderID: ident.NewHolderID(),
		Instance: d.instance, TtlMs: req.timing.TTL.Milliseconds(), Fingerprint: req.fingerprint, MaxAttempts: req.maxAttempts,
	})
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return errs.Errorf("record the outcome of %s: %w", req.label(), err)
	}
	return nil
}

// endWatch is fn's transaction, noting whether fn committed it itself: a misuse, whose outcome
// RunTx then records after the fact.
type endWatch struct {
	pgx.Tx
	committed bool
}

func (w *endWatch) Commit(ctx context.Context) error {
	err := w.Tx.Commit(ctx)
	w.committed = err == nil
	return err
}
