package main

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// A peer's failure is a result: recorded for the page, and the run goes on without its sample.
// pglock's own failures stop the run, and so do the harness's, in whoever's step.
func TestAPeersFailureIsARecordedResult(t *testing.T) {
	t.Parallel()
	ours, peer := design{name: "pglock"}, design{name: "a peer", peer: true}
	boom := errors.New("conn closed")
	tests := []struct {
		name    string
		failing design
		err     error
		wantErr error
		notes   []string
	}{
		{"a peer", peer, boom, nil, []string{"a scenario: a peer failed 3 times (its figures count only what succeeded); the first error: conn closed."}},
		{"pglock", ours, boom, boom, nil},
		{"the harness, in a peer's step", peer, harness(boom), boom, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			r := &report{}
			designs := []design{ours, peer}
			results, err := interleave(context.Background(), len(designs), 3, time.Minute, func(i int) error {
				if designs[i].name == tt.failing.name {
					return r.failed("a scenario", designs[i], tt.err)
				}
				return nil
			})
			require.ErrorIs(t, err, tt.wantErr)
			require.Equal(t, tt.notes, r.peerNotes())
			if tt.wantErr == nil {
				require.Len(t, results[0].samples, 3, "the others are measured")
				require.Empty(t, results[1].samples, "a failed operation measured nothing")
			}
		})
	}
}
