package ops

import (
	"context"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pglock/pglock/leader"
)

// Leaders lists every election with a leader or a waiting candidate (leader.List).
func Leaders(ctx context.Context, pool *pgxpool.Pool) ([]leader.Leader, error) {
	return leader.List(ctx, pool)
}

// Leader is election's leader, or pglock.ErrNoLeader (leader.Current).
func Leader(ctx context.Context, pool *pgxpool.Pool, election string) (leader.Leader, error) {
	return leader.Current(ctx, pool, election)
}

// ElectionLock is the table lock an election's leader holds.
func ElectionLock(election string) string { return leader.LockName(election) }
