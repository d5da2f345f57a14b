package jobs

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pglock/pglock"
	"github.com/pglock/pglock/internal/db"
	"github.com/pglock/pglock/internal/errs"
	"github.com/pglock/pglock/internal/notify"
)

// Mode says when a key's record stops answering its duplicates, so that a delivery runs it
// again. Every mode answers OutcomeInProgress (or, with Options.Wait, waits) while an attempt
// runs, and retries a failed one; they differ on a key that succeeded, and on one that runs.
// docs/jobs.md has the table of what each mode answers in each state. Deliveries of one key
// should all use one mode. The zero Mode is OncePerWindow.
type Mode struct {
	name   string        // pglock_job_claim_in_mode's p_mode
	period time.Duration // PerPeriod's
}

var (
	// OncePerWindow, the default: a key that succeeded is done until its record's retention
	// (Options.Window) ends.
	OncePerWindow = Mode{}
	// WhileRunning: a duplicate is refused only while an attempt runs; once it ended, whatever
	// its outcome, the next delivery runs the key again (a singleton). With Options.Wait,
	// deliveries of a key run one after the other.
	WhileRunning = Mode{name: "while_running"}
	// Supersede: a delivery of a key that runs takes it over: the running attempt's context
	// is canceled with a cause matching [pglock.ErrSuperseded] (and [pglock.ErrLockLost]),
	// its Fence checks and its outcome are refused (a RunTx attempt's transaction is rolled
	// back), and the new delivery runs (once a superseded RunTx transaction has ended). Not
	// with Options.Wait, MaxAttempts or Fingerprint, which it would contradict, nor in
	// RunTxBatch, nor for RunTx with Config.DisableNotifications (the running transaction could
	// not be asked to stop).
	Supersede = Mode{name: "supersede"}
)

// PerPeriod: a key runs once per period of d on the database's clock, periods counted from the
// Unix epoch (UTC), so that PerPeriod(24*time.Hour) is a UTC day on every instance. A delivery in
// a later period than the record's first claim runs it afresh (MaxAttempts counts within a
// period). d is whole milliseconds, from 1 ms to MaxWindow; the record is kept at least d
// (Options.Window is raised to d when shorter).
func PerPeriod(d time.Duration) Mode { return Mode{name: "per_period", period: d} }

// String names the mode as docs/jobs.md does.
func (m Mode) String() string {
	switch m.name {
	case "":
		return "OncePerWindow"
	case "while_running":
		return "WhileRunning"
	case "supersede":
		return "Supersede"
	}
	return fmt.Sprintf("PerPeriod(%s)", m.period)
}

// sqlName is the mode as pglock_job_claim_in_mode names it.
func (m Mode) sqlName() string {
	if m.name == "" {
		return "window"
	}
	return m.name
}

// check refuses a mode that cannot be, or that contradicts opts, with an error matching
// [pglock.ErrInvalidArgument].
func (m Mode) check(opts Options) error {
	invalid := func(format string, args ...any) error {
		return errs.Errorf("%w: Options.Mode %s %s", pglock.ErrInvalidArgument, m, fmt.Sprintf(format, args...))
	}
	switch m.name {
	case "", "while_running":
	case "per_period":
		if m.period < time.Millisecond || m.period > MaxWindow || m.period%time.Millisecond != 0 {
			return invalid("must be whole milliseconds from 1 ms to %s", MaxWindow)
		}
	case "supersede":
		switch {
		case opts.Wait:
			return invalid("runs every delivery at once: Options.Wait contradicts it")
		case opts.MaxAttempts != 0:
			return invalid("runs every delivery: Options.MaxAttempts contradicts it")
		case opts.Fingerprint != "":
			return invalid("runs the newest payload: Options.Fingerprint contradicts it")
		}
	default:
		return invalid("is not a mode of package jobs")
	}
	return nil
}

// attemptKey is the context key of a running attempt, which Fence reads.
type attemptKey struct{}

// Fence checks, in tx, that the attempt whose fn was given ctx still runs: that its lease is
// live and no newer delivery superseded or took it over. It keeps it so until tx ends (a
// delivery that would supersede it waits for tx), and bounds tx on the server to the lease's
// time left plus a second, as tablelock's Fence does. Call it in fn of Run or Do, just before
// the writes it guards, then commit: an error matching [pglock.ErrLockLost] (and
// [pglock.ErrSuperseded] when a newer delivery superseded the attempt) says the writes must not
// commit. Outside fn it returns an error matching [pglock.ErrInvalidArgument].
func Fence(ctx context.Context, tx pgx.Tx) error {
	q, err := db.InTx(tx)
	if err != nil {
		return err
	}
	return fence(ctx, q)
}

// FenceSQL is Fence for a database/sql transaction.
func FenceSQL(ctx context.Context, tx *sql.Tx) error {
	q, err := db.InSQLTx(tx)
	if err != nil {
		return err
	}
	return fence(ctx, q)
}

// fenceGrace is how long past the lease's expiry a fenced transaction may stay idle, or a
// statement in it run, before PostgreSQL ends it.
const fenceGrace = time.Second

func fence(ctx context.Context, q db.DBTX) error {
	a, ok := ctx.Value(attemptKey{}).(*running)
	if !ok {
		return errs.Errorf("%w: Fence needs the context of a Run or Do attempt's fn", pglock.ErrInvalidArgument)
	}
	if err := context.Cause(a.ctx); errors.Is(err, pglock.ErrLockLost) {
		return err // known lost: refused without a round trip
	}
	_, err := db.New(q).FenceJob(ctx, db.FenceJobParams{Scope: a.scope, JobKey: a.key, FencingToken: a.token, GraceMs: fenceGrace.Milliseconds()})
	if errors.Is(err, pgx.ErrNoRows) {
		return errs.Errorf("%w: the attempt (token %d) of %s no longer runs: superseded, taken over or forgotten", pglock.ErrLockLost, a.token, a.label)
	}
	if err != nil {
		if cause := context.Cause(a.ctx); errors.Is(cause, pglock.ErrLockLost) {
			return cause // lost while the check was under way
		}
		return errs.Errorf("fence %s: %w", a.label, err)
	}
	return nil
}

// running is an attempt that runs in this process, for Fence and for its supersession.
type running struct {
	scope, key, label string
	token             int64
	// payload is what announces its supersession: its token (Run), or "lock:" and its key's
	// lock key (RunTx, whose claim is not visible to the superseding delivery; the request adds
	// its own token).
	payload   string
	ctx       context.Context // fn's
	supersede context.CancelCauseFunc
}

// superseding tracks this Deduper's Supersede attempts, by payload, and has the pool's
// listener tell it of those superseded (the channel pglock_job_superseded) while there are any.
type superseding struct {
	mu          sync.Mutex
	attempts    map[string]*running
	unsubscribe func()
}

// track registers a Supersede attempt until the returned function is called; the attempt's
// supersede is called when a newer delivery supersedes it.
func (d *Deduper) track(a *running) (untrack func()) {
	s := &d.superseding
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.attempts == nil {
		s.attempts = map[string]*running{}
	}
	s.attempts[a.payload] = a
	if s.unsubscribe == nil && !d.cfg.DisableNotifications {
		s.unsubscribe = notify.Subscribe(d.pool, d.cfg.ListenerConnConfig, d.cfg.Logger, db.SupersededChannel,
			notify.Handler{Notify: d.superseded, Listening: func() { go d.checkSuperseded() }})
	}
	return sync.OnceFunc(func() {
		s.mu.Lock()
		if s.attempts[a.payload] == a {
			delete(s.attempts, a.payload)
		}
		unsubscribe := s.unsubscribe
		if len(s.attempts) == 0 {
			s.unsubscribe = nil
		} else {
			unsubscribe = nil
		}
		s.mu.Unlock()
		if unsubscribe != nil {
			unsubscribe()
		}
	})
}

// superseded cancels the attempt of this process whose supersession a claim announced: a Run
// attempt's token, or a RunTx attempt's "lock:<lock key>:<token>", which cancels the attempt
// holding that key only if its token is smaller (a request sent while an older attempt held the
// key may arrive once a newer one does).
func (d *Deduper) superseded(payload string) {
	below := int64(math.MaxInt64)
	if rest, ok := strings.CutPrefix(payload, "lock:"); ok {
		key, token, ok := strings.Cut(rest, ":")
		n, err := strconv.ParseInt(token, 10, 64)
		if !ok || err != nil {
			return
		}
		payload, below = "lock:"+key, n
	}
	d.superseding.mu.Lock()
	a := d.superseding.attempts[payload]
	d.superseding.mu.Unlock()
	if a != nil && a.token < below {
		a.supersede(errs.Errorf("%w: %w: a newer delivery of %s took it over from this attempt (token %d)",
			pglock.ErrLockLost, pglock.ErrSuperseded, a.label, a.token))
	}
}

// checkSuperseded reads the records of the Supersede attempts of Run under way, once the
// listener listens (again): a supersession committed before then was announced to nobody. (A
// RunTx attempt's superseding delivery asks again at each of its polls.)
func (d *Deduper) checkSuperseded() {
	d.superseding.mu.Lock()
	attempts := make([]*running, 0, len(d.superseding.attempts))
	for _, a := range d.superseding.attempts {
		if !strings.HasPrefix(a.payload, "lock:") { // a RunTx attempt's delivery asks again
			attempts = append(attempts, a)
		}
	}
	d.superseding.mu.Unlock()
	for _, a := range attempts {
		d.checkAttempt(a)
	}
}

// checkAttempt supersedes a when its record is a newer attempt's.
func (d *Deduper) checkAttempt(a *running) {
	ctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
	row, err := d.queries.GetJob(ctx, db.GetJobParams{Scope: a.scope, JobKey: a.key})
	cancel()
	if err == nil && row.PglockJob.FencingToken > a.token {
		d.superseded(a.payload)
	}
}

// supersededErr is lost when it says the attempt with token was superseded, or, for a
// Supersede attempt that lost its lease without being told why (the announcement missed, or
// notifications disabled), an error saying so when its record is a newer attempt's; nil
// otherwise.
func (d *Deduper) supersededErr(req request, token int64, lost error) error {
	switch {
	case lost == nil || errors.Is(lost, pglock.ErrSuperseded):
		return lost
	case req.mode != Supersede:
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
	defer cancel()
	row, err := d.queries.GetJob(ctx, db.GetJobParams{Scope: req.scope, JobKey: req.key})
	if err != nil || row.PglockJob.FencingToken <= token {
		return nil
	}
	return errs.Errorf("%w: %w: a newer delivery of %s (token %d) took it over from this attempt (token %d)",
		pglock.ErrLockLost, pglock.ErrSuperseded, req.label(), row.PglockJob.FencingToken, token)
}
