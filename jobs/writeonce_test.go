package jobs_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/pglock/pglock"
	"github.com/pglock/pglock/internal/testdb"
	"github.com/pglock/pglock/jobs"
)

// A transactional claim of a key without a record writes nothing; pglock_job_finish_tx writes
// the record, finished, once (no update: every delivery would write the row and its indexes
// twice). The SQL contract callers in other languages follow, step by step.
func TestTransactionalClaimIsWrittenOnceByItsFinish(t *testing.T) {
	t.Parallel()
	d := testdb.New(t, nil)
	ctx := context.Background()
	begin := func(t *testing.T) pgx.Tx {
		t.Helper()
		tx, err := d.Pool.Begin(ctx)
		require.NoError(t, err)
		t.Cleanup(func() { tx.Rollback(ctx) })
		return tx
	}
	claim := func(t *testing.T, tx pgx.Tx, key string) (outcome string, token int64) {
		t.Helper()
		var tok *int64
		require.NoError(t, tx.QueryRow(ctx, `SELECT outcome, fencing_token
			FROM pglock_job_claim('', $1, 'holder', 'instance', true, NULL, NULL, 60000, 0, 0)`, key).Scan(&outcome, &tok))
		if tok != nil {
			token = *tok
		}
		return outcome, token
	}
	finish := func(t *testing.T, tx pgx.Tx, key string, token int64) bool {
		t.Helper()
		var at *string
		require.NoError(t, tx.QueryRow(ctx, `SELECT pglock_job_finish_tx('', $1, $2, 60000)::text`, key, token).Scan(&at))
		return at != nil
	}
	record := func(t *testing.T, key string) (status string, finished bool, found bool) {
		t.Helper()
		err := d.Pool.QueryRow(ctx, `SELECT status, finished_at IS NOT NULL FROM pglock_jobs WHERE scope = '' AND job_key = $1`, key).
			Scan(&status, &finished)
		if err == pgx.ErrNoRows {
			return "", false, false
		}
		require.NoError(t, err)
		return status, finished, true
	}
	writes := func(t *testing.T, tx pgx.Tx) (inserts, updates int64) {
		t.Helper()
		require.NoError(t, tx.QueryRow(ctx, `SELECT coalesce(sum(n_tup_ins), 0), coalesce(sum(n_tup_upd), 0)
			FROM pg_stat_xact_user_tables WHERE relname = 'pglock_jobs'`).Scan(&inserts, &updates))
		return inserts, updates
	}

	t.Run("claim, finish, commit: one insert, finished", func(t *testing.T) {
		tx := begin(t)
		outcome, token := claim(t, tx, "once")
		require.Equal(t, "claimed", outcome)
		require.Positive(t, token)
		ins, upd := writes(t, tx)
		require.Zero(t, ins+upd, "the claim writes nothing")
		require.True(t, finish(t, tx, "once", token))
		ins, upd = writes(t, tx)
		require.Equal(t, [2]int64{1, 0}, [2]int64{ins, upd}, "the finish inserts the record, and nothing updates it")
		require.NoError(t, tx.Commit(ctx))
		status, finished, found := record(t, "once")
		require.True(t, found)
		require.Equal(t, "succeeded", status)
		require.True(t, finished)
	})

	t.Run("a commit without the finish records nothing", func(t *testing.T) {
		tx := begin(t)
		outcome, _ := claim(t, tx, "unfinished")
		require.Equal(t, "claimed", outcome)
		require.NoError(t, tx.Commit(ctx))
		_, _, found := record(t, "unfinished")
		require.False(t, found, "the next delivery runs it")
	})

	t.Run("two keys in one transaction, each finished", func(t *testing.T) {
		tx := begin(t)
		_, a := claim(t, tx, "first-of-two")
		_, b := claim(t, tx, "second-of-two") // writes the first's record, unfinished
		require.True(t, finish(t, tx, "first-of-two", a))
		require.True(t, finish(t, tx, "second-of-two", b))
		require.NoError(t, tx.Commit(ctx))
		for _, key := range []string{"first-of-two", "second-of-two"} {
			status, finished, found := record(t, key)
			require.True(t, found, key)
			require.Equal(t, "succeeded", status, key)
			require.True(t, finished, key)
		}
	})

	t.Run("the same key twice in one transaction is done the second time", func(t *testing.T) {
		tx := begin(t)
		outcome, _ := claim(t, tx, "twice")
		require.Equal(t, "claimed", outcome)
		outcome, _ = claim(t, tx, "twice")
		require.Equal(t, "done", outcome)
	})

	t.Run("a claim rolled back to a savepoint leaves nothing to finish", func(t *testing.T) {
		tx := begin(t)
		_, err := tx.Exec(ctx, `SAVEPOINT before_claim`)
		require.NoError(t, err)
		_, token := claim(t, tx, "rolled-back")
		_, err = tx.Exec(ctx, `ROLLBACK TO SAVEPOINT before_claim`)
		require.NoError(t, err)
		require.False(t, finish(t, tx, "rolled-back", token))
		require.NoError(t, tx.Commit(ctx))
		_, _, found := record(t, "rolled-back")
		require.False(t, found)
	})

	t.Run("a finish with another token finishes nothing", func(t *testing.T) {
		tx := begin(t)
		_, token := claim(t, tx, "wrong-token")
		require.False(t, finish(t, tx, "wrong-token", token+1000))
		require.True(t, finish(t, tx, "wrong-token", token), "its own finish still does")
	})

	t.Run("under REPEATABLE READ a record committed after the snapshot fails the claim", func(t *testing.T) {
		tx, err := d.Pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead})
		require.NoError(t, err)
		defer tx.Rollback(ctx)
		_, err = tx.Exec(ctx, `SELECT 1`) // the snapshot
		require.NoError(t, err)
		other := begin(t)
		_, token := claim(t, other, "after-snapshot")
		require.True(t, finish(t, other, "after-snapshot", token))
		require.NoError(t, other.Commit(ctx))
		_, err = tx.Exec(ctx, `SELECT pglock_job_claim('', 'after-snapshot', 'holder', 'instance', true, NULL, NULL, 60000, 0, 0)`)
		var pgErr *pgconn.PgError
		require.ErrorAs(t, err, &pgErr, "not claimed: the key is done")
		require.Equal(t, pgerrcode.SerializationFailure, pgErr.Code)
	})

	t.Run("a forged pending claim is refused", func(t *testing.T) {
		held := begin(t)
		_, heldToken := claim(t, held, "held-elsewhere")
		for _, tc := range []struct{ name, pending string }{
			{"a key over 1024 bytes", `ROW('', repeat('k', 1025), 'h', 'i', %d, 0, NULL, 60000)`},
			{"a window over ten years", `ROW('', 'forged-window', 'h', 'i', %d, 0, NULL, 315360000001)`},
			{"a token never drawn here", `ROW('', 'forged-token', 'h', 'i', %d + 1000000, 0, NULL, 60000)`},
			{"a key another transaction holds", `ROW('', 'held-elsewhere', 'h', 'i', %d, 0, NULL, 60000)`},
		} {
			t.Run(tc.name, func(t *testing.T) {
				tx := begin(t)
				_, token := claim(t, tx, "forger-"+tc.name) // draws a token in this session
				require.NoError(t, tx.Commit(ctx))
				tx = begin(t)
				_, err := tx.Exec(ctx, `SELECT set_config('pglock.job_claim', (`+fmt.Sprintf(tc.pending, token)+`)::pglock_job_pending::text, true)`)
				require.NoError(t, err)
				var at *string
				err = tx.QueryRow(ctx, `SELECT pglock_job_finish_tx('', 'x', 1, 60000)::text`).Scan(&at)
				var pgErr *pgconn.PgError
				require.ErrorAs(t, err, &pgErr)
				require.Equal(t, pgerrcode.InvalidParameterValue, pgErr.Code)
			})
		}
		require.True(t, finish(t, held, "held-elsewhere", heldToken))
	})
}

// fn that ends RunTx's transaction itself, or resets the settings the claim left, cannot make
// an effect commit without its record, nor record one that rolled back: the first is recorded
// after the fact (done only if fn committed), the second keeps the COMMIT from running.
func TestRunTxKeepsTheOutcomeWithTheEffectWhateverFnDoesToItsTransaction(t *testing.T) {
	t.Parallel()
	d := testdb.New(t, nil)
	ctx := context.Background()
	newEffects(t, d.Pool)
	dd := newDeduper(t, d.Pool, nil)
	effect := func(ctx context.Context, tx pgx.Tx, key string) error {
		_, err := tx.Exec(ctx, `INSERT INTO effects (key) VALUES ($1)`, key)
		return err
	}
	for _, tc := range []struct {
		name    string
		misuse  func(ctx context.Context, tx pgx.Tx) error
		wantErr error
		effects int // committed by the first delivery
		status  jobs.Status
	}{
		{"fn commits", func(ctx context.Context, tx pgx.Tx) error { return tx.Commit(ctx) }, pglock.ErrInvalidArgument, 1, jobs.StatusSucceeded},
		{"fn rolls back", func(ctx context.Context, tx pgx.Tx) error { return tx.Rollback(ctx) }, pglock.ErrInvalidArgument, 0, jobs.StatusFailed},
		{"fn resets every setting", func(ctx context.Context, tx pgx.Tx) error {
			_, err := tx.Exec(ctx, `RESET ALL`)
			return err
		}, pglock.ErrNotFound, 0, jobs.StatusFailed},
		{"fn clears the pending claim", func(ctx context.Context, tx pgx.Tx) error {
			_, err := tx.Exec(ctx, `SELECT set_config('pglock.job_claim', '', true)`)
			return err
		}, pglock.ErrNotFound, 0, jobs.StatusFailed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			key := "misuse: " + tc.name
			_, err := dd.RunTx(ctx, key, nil, func(ctx context.Context, tx pgx.Tx) error {
				if err := effect(ctx, tx, key); err != nil {
					return err
				}
				return tc.misuse(ctx, tx)
			})
			require.ErrorIs(t, err, tc.wantErr)
			require.Equal(t, tc.effects, effects(t, d.Pool, key))
			rec, err := dd.Status(ctx, key)
			require.NoError(t, err)
			require.Equal(t, tc.status, rec.Status)

			res, err := dd.RunTx(ctx, key, nil, func(ctx context.Context, tx pgx.Tx) error { return effect(ctx, tx, key) })
			require.NoError(t, err)
			require.Equal(t, 1, effects(t, d.Pool, key), "exactly once: %v", res.Outcome)
		})
	}
}
