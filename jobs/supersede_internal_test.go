package jobs

import (
	"context"
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pglock/pglock"
)

// A request to stop a RunTx attempt carries the requesting claim's token: one sent while an
// older attempt held the key, arriving once a newer one does, leaves the newer running.
func TestARequestToStopCancelsOnlyAnOlderRunTxAttempt(t *testing.T) {
	t.Parallel()
	d := &Deduper{cfg: Config{DisableNotifications: true}}
	ctx, cancel := context.WithCancelCause(context.Background())
	defer cancel(nil)
	a := &running{label: `"k"`, token: 10, payload: "lock:-42", supersede: cancel}
	untrack := d.track(a)
	defer untrack()

	for _, stale := range []string{"lock:-42:9", "lock:-42:10", "lock:-42:x", "lock:-42", "lock:7:11"} {
		d.superseded(stale)
		require.NoError(t, ctx.Err(), "%s leaves attempt 10 of lock key -42 running", stale)
	}
	d.superseded("lock:-42:11")
	require.True(t, errors.Is(context.Cause(ctx), pglock.ErrSuperseded))

	// An attempt's untracking leaves a newer attempt of the same key tracked.
	b := &running{label: `"k"`, token: 12, payload: "lock:-42", supersede: func(error) {}}
	untrackB := d.track(b)
	defer untrackB()
	untrack()
	d.superseding.mu.Lock()
	defer d.superseding.mu.Unlock()
	require.Same(t, b, d.superseding.attempts["lock:-42"])
}
