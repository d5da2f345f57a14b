package errs_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pglock/pglock"
	"github.com/pglock/pglock/internal/errs"
)

type holderError struct{ holder string }

func (e *holderError) Error() string { return "pglock: held by " + e.holder }

func TestErrorfPrefixesOnceAndKeepsWhatItWraps(t *testing.T) {
	t.Parallel()
	held := &holderError{holder: "a"}
	inner := errs.Errorf("acquire %q: %w", "x", pglock.ErrClosed)
	tests := []struct {
		name string
		err  error
		text string
		is   []error
	}{
		{"a sentinel wrapped", errs.Errorf("acquire %q: %w", "x", pglock.ErrClosed), `pglock: acquire "x": closed`, []error{pglock.ErrClosed}},
		{"a sentinel first", errs.Errorf("%w: nil pool", pglock.ErrInvalidArgument), "pglock: invalid argument: nil pool", []error{pglock.ErrInvalidArgument}},
		{"two sentinels", errs.Errorf("%w: %w: released by Close", pglock.ErrLockLost, pglock.ErrClosed), "pglock: lock lost: closed: released by Close", []error{pglock.ErrLockLost, pglock.ErrClosed}},
		{"a wrapper wrapped", errs.Errorf("campaign: %w", inner), `pglock: campaign: acquire "x": closed`, []error{pglock.ErrClosed}},
		{"an error of another kind", errs.Errorf("wait: %w: %w", pglock.ErrLockTimeout, context.DeadlineExceeded), "pglock: wait: timed out waiting for lock: context deadline exceeded", []error{pglock.ErrLockTimeout, context.DeadlineExceeded}},
		{"a typed error", errs.Errorf("acquire: %w", held), "pglock: acquire: held by a", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tt.text, tt.err.Error())
			for _, target := range tt.is {
				require.ErrorIs(t, tt.err, target)
			}
		})
	}
	var asHeld *holderError
	require.True(t, errors.As(errs.Errorf("acquire: %w", held), &asHeld))
	require.Same(t, held, asHeld)
	require.Equal(t, "pglock: closed", fmt.Sprint(pglock.ErrClosed), "a sentinel returned bare keeps its prefix")
}
