package leader_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/pglock/pglock/internal/testdb"
	"github.com/pglock/pglock/leader"
)

// Leadership given up, by Resign, by OnElected returning or by Run's ctx ending, goes to a
// candidate that was waiting, never back to the one that gave it up, with two candidates and
// three, whether they listen or poll, and through PgBouncer in transaction pooling
// (docs/pgbouncer.md's setup), round after round: 200 rounds of Resign, which campaigns again at
// once (its release once passed over a waiter whose place was being renewed, and the resigner
// took the lock back).
func TestTheWaitingCandidateLeadsNextWhenLeadershipIsGivenUp(t *testing.T) {
	t.Parallel()
	for _, mode := range []struct {
		name            string
		poll, pgbouncer bool
	}{
		{"listening", false, false},
		{"polling", true, false},
		{"polling through PgBouncer", true, true},
	} {
		for _, giveUp := range []string{"Resign", "OnElected returns", "Run's ctx ends"} {
			for _, candidates := range []int{2, 3} {
				rounds := 20
				if giveUp == "Resign" {
					rounds = 200
				}
				t.Run(fmt.Sprintf("%s, %s, %d candidates", mode.name, giveUp, candidates), func(t *testing.T) {
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
					electors := make([]*leader.Elector, candidates)
					stops := make([]func(), candidates)
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
						// Every term here is short: without this, a candidate whose OnElected
						// returned waits seconds before it campaigns again.
						leader.SetCampaignBackoff(electors[i], 10*time.Millisecond)
						start(i)
					}
					current := testdb.Receive(t, elected)
					for round := range rounds {
						waitForCandidates(t, d.Pool, "handover", candidates-1)
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
							"round %d: candidate %d gave leadership up and was elected again while others waited", round, current.candidate)
						current = next
					}
				})
			}
		}
	}
}
