package jobs

import (
	"context"
	"strconv"
	"time"

	"github.com/pglock/pglock/internal/db"
	"github.com/pglock/pglock/internal/errs"
	"github.com/pglock/pglock/internal/ident"
	"github.com/pglock/pglock/internal/notify"
	"github.com/pglock/pglock/internal/retry"
)

// pollBackoff spaces a waiter's claims when no notification comes: one may be missed (the
// listener reconnecting, an outcome committed just as the waiter registered), and a runner that
// vanished sends none; its claim is taken over once it expires.
var pollBackoff = retry.Backoff{First: 50 * time.Millisecond, Max: time.Second}

// waiter is one delivery waiting for an outcome.
type waiter struct {
	id      string // its registration in pglock_job_waiters
	lockKey int64
	wake    chan struct{}
}

// wait returns when the waiter is woken, after a poll's delay, or with ctx's error.
func (w *waiter) wait(ctx context.Context, polls int) error {
	t := time.NewTimer(pollBackoff.Delay(polls))
	defer t.Stop()
	select {
	case <-w.wake:
		return nil
	case <-t.C:
		return nil
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}

// startWaiting registers a waiter locally, listening for announcements while any exists.
func (d *Deduper) startWaiting(lockKey int64) *waiter {
	w := &waiter{id: ident.NewHolderID(), lockKey: lockKey, wake: make(chan struct{}, 1)}
	d.mu.Lock()
	if d.waiters[lockKey] == nil {
		d.waiters[lockKey] = map[*waiter]struct{}{}
	}
	d.waiters[lockKey][w] = struct{}{}
	d.mu.Unlock()

	if !d.cfg.DisableNotifications {
		d.subscribeMu.Lock()
		if d.listeners == 0 {
			d.unsubscribe = notify.Subscribe(d.pool, d.cfg.ListenerConnConfig, d.cfg.Logger, db.JobsChannel,
				notify.Handler{Notify: d.announced, Listening: d.wakeAll})
		}
		d.listeners++
		d.subscribeMu.Unlock()
	}
	return w
}

// register records the waiter in the database (again: a registration lasts waiterTTL), so that
// the key's outcome is announced.
func (d *Deduper) register(ctx context.Context, req request, w *waiter) error {
	if d.cfg.DisableNotifications {
		return nil
	}
	_, err := d.queries.AwaitJob(ctx, db.AwaitJobParams{Scope: req.scope, JobKey: req.key, WaiterID: w.id, TtlMs: waiterTTL.Milliseconds()})
	if err != nil {
		return errs.Errorf("wait for %s: %w", req.label(), err)
	}
	return nil
}

func (d *Deduper) stopWaiting(ctx context.Context, req request, w *waiter) {
	d.mu.Lock()
	delete(d.waiters[w.lockKey], w)
	if len(d.waiters[w.lockKey]) == 0 {
		delete(d.waiters, w.lockKey)
	}
	d.mu.Unlock()
	if d.cfg.DisableNotifications {
		return
	}
	d.subscribeMu.Lock()
	d.listeners--
	if d.listeners == 0 {
		d.unsubscribe()
		d.unsubscribe = nil
	}
	d.subscribeMu.Unlock()
	// A registration left behind costs an announcement nobody hears, until Collect deletes it.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if err := d.queries.UnawaitJob(ctx, db.UnawaitJobParams{Scope: req.scope, JobKey: req.key, WaiterID: w.id}); err != nil {
		d.cfg.Logger.Warn("pglock: could not unregister a job waiter", "job", req.key, "scope", req.scope, "error", err)
	}
}

// announced wakes the waiters of the key whose outcome was announced.
func (d *Deduper) announced(payload string) {
	lockKey, err := strconv.ParseInt(payload, 10, 64)
	if err != nil {
		return
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	for w := range d.waiters[lockKey] {
		wake(w)
	}
}

// wakeAll wakes every waiter to claim again: announcements may have been missed.
func (d *Deduper) wakeAll() {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, ws := range d.waiters {
		for w := range ws {
			wake(w)
		}
	}
}

func wake(w *waiter) {
	select {
	case w.wake <- struct{}{}:
	default:
	}
}
