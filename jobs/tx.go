package jobs

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pglock/pglock"
	"github.com/pglock/pglock/internal/clock"
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
// connection dies before COMMIT leaves no trace: it does not count towards MaxAttempts, whether
// fn returned nil or the error the connection's end gave its statement.
func (d *Deduper) RunTx(ctx context.Context, key string, opts *Options, fn func(ctx context.Context, tx pgx.Tx) error) (Result, error) {
	if fn == nil {
		return Result{}, errs.Errorf("%w: nil fn", pglock.ErrInvalidArgument)
	}
	return d.runTx(ctx, key, opts, func(request) txRun { return &pgxRun{pool: d.pool, fn: fn} })
}

// RunTxSQL is RunTx for a service on database/sql (GORM, sqlx, ent, bun, lib/pq): the
// transaction is begun on sqlDB, of any PostgreSQL driver, and fn gets it as a *sql.Tx; the
// claim and the outcome commit with fn's writes as in RunTx. sqlDB must reach the Deduper's
// database: stdlib.OpenDBFromPool on the Deduper's pool shares its connections
// (docs/databasesql.md).
//
// database/sql sends BEGIN and COMMIT on their own, so the outcome is written with the claim,
// before fn runs, in the same transaction: BEGIN, the claim, fn's round trips, and COMMIT, one
// more than RunTx. Its time (Result.FinishedAt) is then the claim's. database/sql's Commit takes
// no context: the wait for its answer is the driver's. When COMMIT fails, whether it committed
// is read in the key's record, so that a lost answer is not taken for a failure.
func (d *Deduper) RunTxSQL(ctx context.Context, sqlDB *sql.DB, key string, opts *Options, fn func(ctx context.Context, tx *sql.Tx) error) (Result, error) {
	switch {
	case sqlDB == nil:
		return Result{}, errs.Errorf("%w: nil *sql.DB", pglock.ErrInvalidArgument)
	case fn == nil:
		return Result{}, errs.Errorf("%w: nil fn", pglock.ErrInvalidArgument)
	}
	return d.runTx(ctx, key, opts, func(req request) txRun { return &sqlRun{sqlDB: sqlDB, fn: fn, ours: d.succeededWith(req)} })
}

func (d *Deduper) runTx(ctx context.Context, key string, opts *Options, newRun func(request) txRun) (Result, error) {
	req, err := d.newRequest(key, opts)
	if err != nil {
		return Result{}, err
	}
	if req.mode == Supersede {
		if d.cfg.DisableNotifications {
			return Result{}, errs.Errorf("%w: Options.Mode Supersede for RunTx asks the running transaction's runner to stop through a notification: Config.DisableNotifications forbids it",
				pglock.ErrInvalidArgument)
		}
		// A key another transaction holds is answered in progress: this delivery asks that
		// attempt to stop (attemptTx), again at each claim, until its transaction has ended.
		req.wait = true
	}
	return d.deliver(ctx, req, pglock.ModeRunTx, func(ctx context.Context, req request) (Result, int64, error) {
		return d.attemptTx(ctx, req, newRun(req))
	})
}

// txRun is the transaction of one RunTx attempt, on pgx or on database/sql.
type txRun interface {
	// claim begins the transaction and claims the key in it.
	claim(ctx context.Context, p db.ClaimJobTxParams) (db.ClaimJobTxRow, error)
	// call runs fn in the transaction.
	call(ctx context.Context) error
	// left says what fn left of the transaction, as far as the driver tells: open (or not
	// known), aborted, ended (and how), or lost with its connection. fnErr is what fn returned:
	// where the driver cannot tell without asking, it asks only when fn failed.
	left(ctx context.Context, fnErr error) (txState, endedByFn)
	// commit writes the outcome (finish, where the outcome is not written with the claim) and
	// commits, returning the outcome's time. Where left could not tell, it returns endedByFn or
	// errAborted.
	commit(ctx context.Context, finish finishFunc) (time.Time, error)
	// rollback rolls back, bounded: on a connection that stopped answering, a rollback would wait
	// for TCP to give up. Where left could not tell, it returns endedByFn.
	rollback(ctx context.Context) error
	// close gives the connection back.
	close()
}

// finishFunc writes the outcome of the claims of a transaction, through q, just before its COMMIT.
type finishFunc func(ctx context.Context, q *db.Queries) (time.Time, error)

type txState int

const (
	txOpen txState = iota
	txAborted
	txEnded
	txLost // its connection is gone, and the server rolled it back
)

// endedByFn says how fn ended the transaction itself; it is commit's and rollback's error when
// only they can tell.
type endedByFn struct {
	committed bool // through Commit (on database/sql: found committed)
	recorded  bool // and the outcome with it (RunTxSQL writes it with the claim)
}

func (e endedByFn) Error() string { return "pglock: fn ended the transaction itself" }

// errAborted is commit's error when fn left the transaction aborted.
var errAborted = errors.New("pglock: the transaction was aborted")

func (d *Deduper) attemptTx(ctx context.Context, req request, run txRun) (res Result, lockKey int64, err error) {
	defer run.close()
	claimed, err := run.claim(ctx, db.ClaimJobTxParams{
		Scope: req.scope, JobKey: req.key, HolderID: ident.NewHolderID(), Instance: d.instance, Fingerprint: req.fingerprint,
		WindowMs: req.window.Milliseconds(), MaxAttempts: req.maxAttempts, IdleTimeoutMs: max(0, d.cfg.TxIdleTimeout.Milliseconds()),
		Mode: req.mode.sqlName(), PeriodMs: req.periodMs()})
	if err != nil {
		run.rollback(ctx)
		return Result{}, 0, errs.Errorf("claim %s: %w", req.label(), err)
	}
	a := db.ClaimJobRow(claimed) // the same columns
	res, err = req.answer(a)
	if err != nil || res.Outcome != OutcomeRan {
		run.rollback(ctx) // nothing was written: no WAL to flush
		if err == nil && res.Outcome == OutcomeInProgress && req.mode == Supersede {
			// Ask the transaction holding the key to stop; its runner rolls it back.
			if err := d.queries.SupersedeTx(ctx, db.SupersedeTxParams{LockKey: db.Deref(a.LockKey), Token: res.Token}); err != nil {
				return res, 0, errs.Errorf("supersede %s: %w", req.label(), err)
			}
		}
		return res, db.Deref(a.LockKey), err
	}

	superseded := func() error { return nil }
	outer, untrack := ctx, func() {}
	if req.mode == Supersede {
		// Canceled with ErrSuperseded when a newer delivery asks, until the commit begins.
		var supersede context.CancelCauseFunc
		ctx, supersede = context.WithCancelCause(ctx)
		defer supersede(nil)
		untrack = d.track(&running{scope: req.scope, key: req.key, label: req.label(), token: res.Token,
			payload: "lock:" + strconv.FormatInt(db.Deref(a.LockKey), 10), supersede: supersede})
		defer untrack()
		superseded = func() error {
			if cause := context.Cause(ctx); errors.Is(cause, pglock.ErrSuperseded) {
				return cause
			}
			return nil
		}
	}
	runCtx, ran := d.beginRun(ctx, req, pglock.ModeRunTx, res)
	record := func(outcome error) error {
		if superseded() != nil {
			return nil // the newer delivery runs the key: its outcome is the one to record
		}
		return d.recordOutcome(ctx, req, outcome)
	}
	_, fnErr := callRecovering(func() (struct{}, error) { return struct{}{}, run.call(runCtx) }, func(panicked error) {
		ran(panicked)
		run.rollback(ctx)
		record(panicked)
	})
	if cause := superseded(); cause != nil {
		fnErr = errors.Join(fnErr, cause) // not committed, whatever fn returned
	} else if fnErr == nil {
		// The commit goes on, whatever is asked from now: a newer delivery waits for it.
		untrack()
		ctx = outer
	}
	ran(fnErr)
	res.FinishedAt, err = d.endTx(ctx, run, fnErr, req.label(), func(ctx context.Context, q *db.Queries) (time.Time, error) {
		return q.FinishJobTx(ctx, db.FinishJobTxParams{Scope: req.scope, JobKey: req.key, FencingToken: res.Token, WindowMs: req.window.Milliseconds()})
	}, record)
	return res, 0, err
}

// endTx ends the transaction of an attempt (named label) after fn returned fnErr, as fn left
// it: it commits the outcome (finish) with fn's writes, or rolls them back and records the
// failure (record), and returns the outcome's time when committed. An error says nothing was
// committed, or that whether it was is unknown.
func (d *Deduper) endTx(ctx context.Context, run txRun, fnErr error, label string, finish finishFunc, record func(outcome error) error) (time.Time, error) {
	state, ended := run.left(ctx, fnErr)
	// fn's own timeout: its context's error, or (lib/pq) the server's answer to the cancel
	// request the driver sent when it ended.
	ownTimeout := errors.Is(fnErr, context.DeadlineExceeded) || errors.Is(fnErr, context.Canceled) || db.StatementCanceled(fnErr)
	if state == txLost && (fnErr == nil || (ctx.Err() == nil && !ownTimeout)) {
		// The connection died under fn: the transaction, claim and all, was rolled back by the
		// server, as when it dies before COMMIT, whatever fn returned (the error its statement
		// got, or nil if it swallowed it). The attempt leaves no trace and does not count
		// (MaxAttempts): recording fn's error would. A connection fn's own context ended (pgx
		// closes one whose statement is canceled; lib/pq stops using it) is fn's failure, and counts: else a job
		// that always times out would be delivered for ever.
		run.rollback(ctx)
		lost := errs.Errorf("%s: the connection ended while fn ran; nothing was committed, and the attempt does not count", label)
		if fnErr != nil {
			lost = errs.Errorf("%w: %w", lost, fnErr)
		}
		return time.Time{}, lost
	}
	var (
		finishedAt time.Time
		err        error
	)
	if state == txOpen {
		if fnErr == nil {
			// Past TxIdleTimeout a session that heard nothing has been ended, and its transaction with it.
			commitCtx, cancel := ctx, context.CancelFunc(func() {})
			if d.cfg.TxIdleTimeout > 0 {
				commitCtx, cancel = context.WithTimeout(ctx, d.cfg.TxIdleTimeout)
			}
			finishedAt, err = run.commit(commitCtx, finish)
			cancel()
		} else {
			err = run.rollback(ctx)
		}
		var found endedByFn // what database/sql tells only now
		switch {
		case errors.As(err, &found):
			state, ended = txEnded, found
		case errors.Is(err, errAborted):
			state = txAborted
		}
	}
	switch state {
	case txEnded:
		if ended.recorded {
			return time.Time{}, errors.Join(fnErr, errs.Errorf("%w: fn ended the transaction of %s itself; it committed, and the outcome written with the claim, succeeded, with it",
				pglock.ErrInvalidArgument, label))
		}
		// fn ended the transaction, and with it the claim, which only finish writes. Its
		// outcome is recorded now, after the fact (unless a redelivery claimed the key in
		// between): what fn said if it committed through tx.Commit, else a failure, for its
		// writes may be gone.
		outcome := fnErr
		if !ended.committed && outcome == nil {
			outcome = errs.Errorf("fn ended the transaction of %s itself, not with tx.Commit", label)
		}
		as := "succeeded"
		if outcome != nil {
			as = "failed"
		}
		misuse := errs.Errorf("%w: fn ended the transaction of %s itself; its outcome was recorded after the fact, as %s",
			pglock.ErrInvalidArgument, label, as)
		return time.Time{}, errors.Join(fnErr, misuse, record(outcome))
	case txAborted:
		if fnErr == nil {
			fnErr = errs.Errorf("fn returned no error but left the transaction of %s aborted", label)
		}
	}
	if fnErr != nil {
		run.rollback(ctx)
		return time.Time{}, errors.Join(fnErr, record(fnErr))
	}
	switch {
	case db.StateOf(err) != "" && !db.ConnectionEnded(err):
		// The server refused the statement or the COMMIT (a deferred constraint, a
		// serialization failure): nothing was committed.
		run.rollback(ctx)
		err = errs.Errorf("commit %s: %w", label, err)
		return time.Time{}, errors.Join(err, record(err))
	case err != nil:
		run.rollback(ctx)
		// The commit may have happened with the connection lost (or ended by the server) on the
		// way back: the next delivery finds out.
		return time.Time{}, errs.Errorf("commit %s (the outcome is unknown: a redelivery runs it again unless it committed): %w",
			label, err)
	}
	return finishedAt, nil
}

// pgxRun is RunTx's transaction: BEGIN goes with the claim, and COMMIT with the outcome, one
// round trip each.
type pgxRun struct {
	pool    *pgxpool.Pool
	fn      func(ctx context.Context, tx pgx.Tx) error
	conn    *pgxpool.Conn
	tx      pgx.Tx
	watched *endWatch
}

func (r *pgxRun) claim(ctx context.Context, p db.ClaimJobTxParams) (row db.ClaimJobTxRow, err error) {
	// The claim writes nothing yet for a key without a record: the outcome, succeeded, is
	// written by FinishJobTx just before COMMIT, so that committing the transaction commits it
	// with fn's writes, and rolling it back leaves the key to the next delivery.
	err = r.begin(ctx, func(q *db.Queries) (err error) {
		row, err = q.ClaimJobTx(ctx, p)
		return err
	})
	return row, err
}

// begin takes a connection and sends BEGIN with claim's statement, in one round trip.
func (r *pgxRun) begin(ctx context.Context, claim func(q *db.Queries) error) error {
	conn, err := r.pool.Acquire(ctx)
	if err != nil {
		return db.Translate(err)
	}
	// The connection goes back to the pool idle, or is closed: pgxpool closes one still in a
	// transaction. A transaction that commits ends with the COMMIT pipelined after the
	// announcement, not through tx.Commit, which would cost a round trip of its own.
	r.conn = conn
	begin := db.Begin(conn.Conn())
	err = claim(db.New(db.Translating(begin)))
	r.tx = begin.Tx()
	return err
}

func (r *pgxRun) call(ctx context.Context) error {
	r.watched = &endWatch{Tx: r.tx}
	return r.fn(ctx, r.watched)
}

func (r *pgxRun) left(context.Context, error) (txState, endedByFn) {
	if r.conn.Conn().IsClosed() {
		return txLost, endedByFn{}
	}
	switch r.conn.Conn().PgConn().TxStatus() {
	case 'I':
		return txEnded, endedByFn{committed: r.watched.committed}
	case 'E':
		return txAborted, endedByFn{}
	}
	return txOpen, endedByFn{}
}

func (r *pgxRun) commit(ctx context.Context, finish finishFunc) (time.Time, error) {
	return finish(ctx, db.New(db.Translating(db.Around(r.tx, nil, []string{"COMMIT"}))))
}

// rollback is bounded; pgx closes a connection whose rollback fails, and the server then rolls
// back. A closed connection is waited for until its session has ended: pgx cancels the statement
// under way and says goodbye in the background, and until the server has taken both, the
// session holds the claim, and an outcome recorded in its place would find the key running.
func (r *pgxRun) rollback(ctx context.Context) error {
	if r.tx == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
	defer cancel()
	r.tx.Rollback(ctx)
	if pgConn := r.conn.Conn().PgConn(); pgConn.IsClosed() {
		select {
		case <-pgConn.CleanupDone(): // the server closed the session
		case <-ctx.Done():
		}
	}
	return nil
}

func (r *pgxRun) close() {
	if r.conn != nil {
		r.conn.Release()
	}
}

// sqlRun is RunTxSQL's transaction, of database/sql: BEGIN and COMMIT are round trips of their
// own, and the outcome goes with the claim.
type sqlRun struct {
	sqlDB *sql.DB
	fn    func(ctx context.Context, tx *sql.Tx) error
	// ours reads whether the key's outcome is the success of the attempt with the token.
	ours       func(ctx context.Context, token int64) (bool, error)
	ctx        context.Context // the transaction's: database/sql rolls it back once it ends
	tx         *sql.Tx
	ended      bool // by commit or rollback
	token      int64
	finishedAt time.Time
}

func (r *sqlRun) claim(ctx context.Context, p db.ClaimJobTxParams) (db.ClaimJobTxRow, error) {
	tx, err := r.sqlDB.BeginTx(ctx, nil)
	if err != nil {
		return db.ClaimJobTxRow{}, db.Translate(err)
	}
	in, err := db.InSQLTx(tx)
	if err != nil {
		return db.ClaimJobTxRow{}, err
	}
	r.ctx, r.tx = ctx, tx
	p.Finish = true
	row, err := db.New(in).ClaimJobTx(ctx, p)
	if err == nil && row.Outcome == "claimed" {
		r.token, r.finishedAt = db.Deref(row.FencingToken), db.Deref(row.FinishedAt)
	}
	return row, err
}

func (r *sqlRun) call(ctx context.Context) error { return r.fn(ctx, r.tx) }

// left: database/sql says nothing of the transaction's state until it is used. When fn
// failed, a statement asks whether the connection is gone (fn's error alone cannot say: its own
// timeouts and network errors look alike); otherwise commit and rollback find out.
func (r *sqlRun) left(ctx context.Context, fnErr error) (txState, endedByFn) {
	if fnErr == nil || ctx.Err() != nil {
		return txOpen, endedByFn{}
	}
	_, err := r.tx.ExecContext(ctx, "SELECT 1")
	if err != nil && !errors.Is(err, sql.ErrTxDone) && (db.ConnectionEnded(err) || db.MadeByClient(err)) {
		return txLost, endedByFn{}
	}
	return txOpen, endedByFn{}
}

// commit commits the outcome written with the claim. When COMMIT fails, the key's record says
// whether the transaction committed, so that the failure is told as RunTx tells it: fn ended the
// transaction (committed or not), left it aborted, the server refused the COMMIT, or nobody
// knows.
func (r *sqlRun) commit(context.Context, finishFunc) (time.Time, error) {
	r.ended = true
	err := r.tx.Commit()
	if err == nil {
		return r.finishedAt, nil
	}
	ours, checkErr := r.committed()
	switch {
	case checkErr != nil:
		return time.Time{}, errs.Errorf("%w (whether it committed could not be read: %v)", err, checkErr)
	case errors.Is(err, sql.ErrTxDone) && r.ctx.Err() == nil:
		return time.Time{}, endedByFn{committed: ours, recorded: ours}
	case ours:
		return r.finishedAt, nil // it committed, and the answer was lost on the way
	case r.ctx.Err() != nil:
		return time.Time{}, errs.Errorf("%w (its context ended as it committed)", err)
	case db.StateOf(err) != "" || db.MadeByClient(err):
		return time.Time{}, err
	}
	// Neither the server's error nor a broken connection: a driver's own refusal to commit an
	// aborted transaction (pgx's ErrTxCommitRollback, lib/pq's ErrInFailedTransaction).
	return time.Time{}, fmt.Errorf("%w: %w", errAborted, err)
}

// rollback needs no bound of its own: database/sql's Rollback takes no context, and the
// driver's wait is what it is. A transaction fn ended itself is told by the record.
func (r *sqlRun) rollback(context.Context) error {
	if r.tx == nil || r.ended {
		return nil
	}
	r.ended = true
	if err := r.tx.Rollback(); !errors.Is(err, sql.ErrTxDone) || r.ctx.Err() != nil || r.token == 0 {
		return nil // rolled back (or by database/sql, as the context ended)
	}
	ours, err := r.committed()
	if err != nil {
		return nil // what fn did is not known; recordOutcome records a failure unless it committed
	}
	return endedByFn{committed: ours, recorded: ours}
}

// committed reads whether the attempt's outcome committed, bounded, whatever the transaction's
// context.
func (r *sqlRun) committed() (bool, error) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.ctx), cleanupTimeout)
	defer cancel()
	return r.ours(ctx, r.token)
}

func (r *sqlRun) close() {}

// succeededWith reads whether req's key is recorded as succeeded by the attempt with a token.
func (d *Deduper) succeededWith(req request) func(ctx context.Context, token int64) (bool, error) {
	return func(ctx context.Context, token int64) (bool, error) {
		row, err := d.queries.GetJob(ctx, db.GetJobParams{Scope: req.scope, JobKey: req.key})
		switch {
		case errors.Is(err, pgx.ErrNoRows):
			return false, nil
		case err != nil:
			return false, err
		}
		return row.PglockJob.Status == string(StatusSucceeded) && row.PglockJob.FencingToken == token, nil
	}
}

// recordOutcome records the outcome of a RunTx attempt whose transaction did not: its failure
// (fnErr) after the transaction rolled back, so that it counts towards MaxAttempts and shows its
// error; its success when fn committed it itself. Unless another delivery claimed the key
// meanwhile. While a transaction still holds the key, it waits (bounded): a session whose
// connection the client closed (fn's own timeout, on database/sql, whose driver gives no way to
// wait for the server) ends on the server a moment later, and until then its claim holds the key.
// An error says the outcome was not recorded.
func (d *Deduper) recordOutcome(ctx context.Context, req request, fnErr error) error {
	p := finishParams(req, 0, nil, fnErr)
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
	defer cancel()
	settled := false // the key was found not held by a transaction once: one more try, then done
	for tries := 0; ; tries++ {
		_, err := d.queries.RecordJobOutcome(ctx, db.RecordJobOutcomeParams{
			Scope: req.scope, JobKey: req.key, Succeeded: p.Succeeded, Error: p.Error, WindowMs: p.WindowMs, HolderID: ident.NewHolderID(),
			Instance: d.instance, TtlMs: req.timing.TTL.Milliseconds(), Fingerprint: req.fingerprint, MaxAttempts: req.maxAttempts,
			Mode: req.mode.sqlName(), PeriodMs: req.periodMs(),
		})
		if errors.Is(err, pgx.ErrNoRows) {
			// Not claimed: done, given up, or running. Held by a transaction (no lease), it is
			// tried again until that ends; a redelivery's transaction may outlast the wait, and
			// its own outcome then counts. Found not held, it is tried once more: the holder may
			// have ended between the try and the look.
			w, werr := d.queries.WatchJob(ctx, db.WatchJobParams{Scope: req.scope, JobKey: req.key})
			switch {
			case werr == nil && w.Running && w.LeaseLeftMs == 0:
				if pollBackoff.Sleep(ctx, clock.Real, tries) {
					continue
				}
			case werr == nil && !settled:
				settled = true
				continue
			}
			return nil
		}
		if err != nil {
			return errs.Errorf("record the outcome of %s: %w", req.label(), err)
		}
		return nil
	}
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
