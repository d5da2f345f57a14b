package tablelock

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

type answer[T any] struct {
	value T
	err   error
}

// settled sends a request whose outcome must be known here: it runs on a context the caller
// cannot cancel (bounded by the Locker's life and limit), because a request cut short on the
// wire may still run, and commit, on the server. If ctx ends first, settled returns at once
// and, once the request's answer comes, undo runs with it in the background; Close waits for
// that as long as its ctx allows. The caller must hold a count in l.waits.
func settled[T any](l *Locker, ctx context.Context, limit time.Duration, send func(context.Context) (T, error), undo func(T, error)) (T, error) {
	answers := make(chan answer[T], 1)
	go func() {
		sendCtx, cancel := context.WithTimeout(l.ctx, limit)
		defer cancel()
		value, err := send(sendCtx)
		answers <- answer[T]{value, err}
	}()
	select {
	case a := <-answers:
		return a.value, a.err
	case <-ctx.Done():
		l.waits.Add(1)
		go func() {
			defer l.waits.Done()
			a := <-answers
			undo(a.value, a.err)
		}()
		var zero T
		return zero, context.Cause(ctx)
	}
}

// startTry counts a try in l.waits, so that Close waits for it, and lets Close cut off its
// connection; false once closed.
func (l *Locker) startTry(conn *pgxpool.Conn) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return false
	}
	l.waits.Add(1)
	l.tryConns[conn] = struct{}{}
	return true
}

// endTry takes the try's connection out of Close's reach, and reports whether Close cut it
// off. A try that finished before the deadline struck leaves it behind: it is cleared, so that
// the connection goes back to the pool usable. A connection the deadline did cut is pgx's to
// close, under a deadline of pgx's own that must stay. The count in l.waits stays the
// caller's to end.
func (l *Locker) endTry(conn *pgxpool.Conn) (cutOff bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.tryConns, conn)
	if l.closed && !conn.Conn().IsClosed() {
		conn.Conn().PgConn().Conn().SetDeadline(time.Time{})
	}
	return l.closed
}

func (l *Locker) isClosed() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.closed
}
