package jobs

import (
	"context"
	"strconv"
	"sync"
	"time"

	"github.com/pglock/pglock/internal/backoff"
	"github.com/pglock/pglock/internal/db"
	"github.com/pglock/pglock/internal/ident"
	"github.com/pglock/pglock/internal/notify"
)

// pollBackoff spaces a watch's checks of a key run in a transaction elsewhere (RunTx, whose
// claim holds the key's lock until it ends) when no announcement comes: one may be missed (the
// listener reconnecting, an outcome committed just as the watch registered). A key run outside
// a transaction is checked when its lease could end, and a runner that vanished is taken over
// then; without notifications (Config.DisableNotifications), when nothing announces its end,
// it is checked as a transaction's key is.
var pollBackoff = backoff.Capped{First: 50 * time.Millisecond, Max: time.Second}

// watch is what the deliveries of one key waiting in this process share: one registration in
// pglock_job_waiters, and one check of the key, on a goroutine of its own, while any waits.
// The deliveries claim again only when the watch says the run may be over (an announcement,
// the listener reconnecting, or a check that finds the key no longer running).
type watch struct {
	d       *Deduper
	req     request // the first waiting delivery's: the key and its scope
	lockKey int64
	id      string // its registration in pglock_job_waiters

	registered chan struct{} // closed once the watch has tried to register
	stop       context.CancelFunc
	done       chan struct{}

	mu      sync.Mutex
	members int           // counted under the Deduper's mutex, with the map the watch is in
	changed chan struct{} // closed when the run may be over, then replaced
}

// wake tells the waiting deliveries to claim again.
func (w *watch) wake() {
	w.mu.Lock()
	close(w.changed)
	w.changed = make(chan struct{})
	w.mu.Unlock()
}

// next is the channel closed at the next wake.
func (w *watch) next() <-chan struct{} {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.changed
}

// startWaiting adds a delivery of req's key to its watch (made, registered and checked from
// then on, if it is the first), and returns the watch and the channel of its next wake. The
// caller claims once more before it waits: an outcome committed before the registration was
// not announced.
func (d *Deduper) startWaiting(req request, lockKey int64) (*watch, <-chan struct{}) {
	d.mu.Lock()
	w := d.watches[lockKey]
	if w == nil {
		ctx, stop := context.WithCancel(context.Background())
		w = &watch{d: d, req: req, lockKey: lockKey, id: ident.NewHolderID(), changed: make(chan struct{}),
			registered: make(chan struct{}), stop: stop, done: make(chan struct{})}
		d.watches[lockKey] = w
		d.subscribe()
		go w.run(ctx)
	}
	w.mu.Lock()
	w.members++
	next := w.changed
	w.mu.Unlock()
	d.mu.Unlock()
	<-w.registered
	return w, next
}

// stopWaiting takes a delivery off its watch; the last one ends the watch.
func (d *Deduper) stopWaiting(w *watch) {
	d.mu.Lock()
	w.mu.Lock()
	w.members--
	last := w.members == 0
	w.mu.Unlock()
	if last {
		delete(d.watches, w.lockKey)
	}
	d.mu.Unlock()
	if last {
		w.stop()
		<-w.done
		d.unsubscribe()
	}
}

// run registers the watch (w.registered is closed once it has tried), checks the key until ctx
// ends, and unregisters it.
func (w *watch) run(ctx context.Context) {
	defer close(w.done)
	d, req := w.d, w.req
	var renewAt time.Time // when the registration is made again
	register := func() {
		if d.cfg.DisableNotifications || time.Now().Before(renewAt) {
			return
		}
		renewAt = time.Now().Add(waiterTTL / 3)
		_, err := d.queries.AwaitJob(ctx, db.AwaitJobParams{Scope: req.scope, JobKey: req.key, WaiterID: w.id, TtlMs: waiterTTL.Milliseconds()})
		if err != nil {
			renewAt = time.Now().Add(pollBackoff.Max) // and the checks go on meanwhile
			if ctx.Err() == nil {
				d.cfg.Logger.Warn("pglock: could not register a job waiter; checking the key meanwhile", "job", req.key, "scope", req.scope, "error", err)
			}
		}
	}
	register()
	close(w.registered)
	defer func() {
		if d.cfg.DisableNotifications {
			return
		}
		// A registration left behind costs an announcement nobody hears, until Collect deletes it.
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := d.queries.UnawaitJob(ctx, db.UnawaitJobParams{Scope: req.scope, JobKey: req.key, WaiterID: w.id}); err != nil {
			d.cfg.Logger.Warn("pglock: could not unregister a job waiter", "job", req.key, "scope", req.scope, "error", err)
		}
	}()

	delay := pollBackoff.Delay(0)
	for checks := 1; ; checks++ {
		if !d.cfg.DisableNotifications {
			delay = min(delay, max(time.Until(renewAt), 0))
		}
		timer := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			timer.Stop()
			return
		case <-timer.C:
		}
		register()
		row, err := d.queries.WatchJob(ctx, db.WatchJobParams{Scope: req.scope, JobKey: req.key})
		switch {
		case ctx.Err() != nil:
			return
		case err != nil:
			delay = pollBackoff.Delay(checks)
		case !row.Running:
			w.wake()
			delay, checks = pollBackoff.Delay(0), 0
		case row.LeaseLeftMs > 0 && !d.cfg.DisableNotifications:
			// Run outside a transaction: its end is announced; failing that, it runs at least
			// until its lease could end.
			delay, checks = time.Duration(row.LeaseLeftMs+1)*time.Millisecond, 0
		default:
			// In a transaction elsewhere, or unannounced (notifications off): until it ends.
			delay = pollBackoff.Delay(checks)
		}
	}
}

// wait returns when the watch says the run may be over (next closes), or with ctx's error.
func (w *watch) wait(ctx context.Context, next <-chan struct{}) error {
	select {
	case <-next:
		return nil
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}

// subscribe has the pool's listener deliver announcements while there are watches. Called with
// d.mu held, for each new watch.
func (d *Deduper) subscribe() {
	if d.cfg.DisableNotifications {
		return
	}
	d.subscribeMu.Lock()
	defer d.subscribeMu.Unlock()
	if d.listeners == 0 {
		d.unsubscribeAll = notify.Subscribe(d.pool, d.cfg.ListenerConnConfig, d.cfg.Logger, db.JobsChannel,
			notify.Handler{Notify: d.announced, Listening: d.wakeAll})
	}
	d.listeners++
}

// unsubscribe ends the subscription with the last watch.
func (d *Deduper) unsubscribe() {
	if d.cfg.DisableNotifications {
		return
	}
	d.subscribeMu.Lock()
	defer d.subscribeMu.Unlock()
	d.listeners--
	if d.listeners == 0 {
		d.unsubscribeAll()
		d.unsubscribeAll = nil
	}
}

// announced wakes the deliveries waiting for the key whose outcome was announced.
func (d *Deduper) announced(payload string) {
	lockKey, err := strconv.ParseInt(payload, 10, 64)
	if err != nil {
		return
	}
	d.mu.Lock()
	w := d.watches[lockKey]
	d.mu.Unlock()
	if w != nil {
		w.wake()
	}
}

// wakeAll wakes every waiting delivery to claim again: announcements may have been missed.
func (d *Deduper) wakeAll() {
	d.mu.Lock()
	watches := make([]*watch, 0, len(d.watches))
	for _, w := range d.watches {
		watches = append(watches, w)
	}
	d.mu.Unlock()
	for _, w := range watches {
		w.wake()
	}
}
