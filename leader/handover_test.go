package leader_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/pglock/pglock/internal/testdb"
	"github.com/pglock/pglock/leader"
)

// Leadership given up, by Resign, by OnElected returning or by Run's ctx ending, goes to the
// candidate that was waiting, never back to the one that gave it up, whether candidates listen
// or poll, and through PgBouncer in transaction pooling (docs/pgbouncer.md's setup), round
// after round.
func TestTheWaitingCandidateLeadsNextWhenLeadershipIsGivenUp(t *testing.T) {
	t.Parallel()
	const rounds = 20
	for _, mode := range []struct {
		name            string
		poll, pgbouncer bool
	}{
		{"listening", false, false},
		{"polling", true, false},
		{"polling through PgBouncer", true, true},
	} {
		for _, giveUp := range []string{"Resign", "OnElected returns", "Run's ctx ends"} {
			t.Run(mode.name+", "+giveUp, func(t *testing.T) {
				t.Parallel()
				d := testdb.New(t, nil)
				ctx := context.Background()
				newPool := func() *pgxpool.Pool {
					if !mode.pgbouncer {
						return d.NewPool(t, nil)
					}
					return testdb.OpenPool(t, d.ThroughPgBouncer(t, "default_query_exec_mode=exec"), nil)
				}
				type term struct {
					candidate int
					resign    chan struct{} // closed to make OnElected return
				}
				elected := make(chan term, 2*rounds)
				electors := make([]*leader.Elector, 2)
				stops := make([]func(), 2)
				start := func(i int) {
					stops[i] = campaign(t, electors[i], leader.Callbacks{OnElected: func(ctx context.Context, _ int64) {
						resign := make(chan struct{})
						elected <- term{i, resign}
						select {
						case <-ctx.Done():
						case <-resign:
						}
					}})
				}
				for i := range electors {
					electors[i] = newElector(t, newPool(), "handover", &leader.Config{DisableNotifications: mode.poll})
					start(i)
				}
				current := testdb.Receive(t, elected)
				for round := range rounds {
					waitForCandidates(t, d.Pool, "handover", 1)
					switch giveUp {
					case "Resign":
						require.NoError(t, electors[current.candidate].Resign(ctx))
					case "OnElected returns":
						close(current.resign)
					case "Run's ctx ends":
						stops[current.candidate]()
						start(current.candidate)
					}
					next := testdb.Receive(t, elected)
					require.NotEqual(t, current.candidate, next.candidate,
						"round %d: candidate %d gave leadership up and was elected again while the other waited", round, current.candidate)
					current = next
				}
			})
		}
	}
}
