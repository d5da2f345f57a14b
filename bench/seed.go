package main

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// seedSchema is the design pglock grew from (../shared/seeds, drift-distributed-lock): its
// table and plpgsql functions as the seed gives them, on now(), in a schema of their own so
// that they stand beside pglock's.
const seedSchema = `
CREATE SCHEMA seed_design;
CREATE TABLE seed_design.distributed_locks (
	lock_name VARCHAR(255) PRIMARY KEY,
	holder_id VARCHAR(255) NOT NULL,
	acquired_at TIMESTAMPTZ NOT NULL DEFAULT NOW(),
	expires_at TIMESTAMPTZ NOT NULL,
	metadata JSONB DEFAULT '{}'
);
CREATE INDEX idx_locks_expires ON seed_design.distributed_locks(expires_at);
CREATE FUNCTION seed_design.acquire_lock(
	p_lock_name VARCHAR(255), p_holder_id VARCHAR(255),
	p_ttl_seconds INTEGER DEFAULT 30, p_metadata JSONB DEFAULT '{}'
) RETURNS BOOLEAN AS $$
DECLARE
	v_now TIMESTAMPTZ := NOW();
	v_expires_at TIMESTAMPTZ := v_now + (p_ttl_seconds || ' seconds')::INTERVAL;
BEGIN
	DELETE FROM seed_design.distributed_locks WHERE lock_name = p_lock_name AND expires_at < v_now;
	INSERT INTO seed_design.distributed_locks (lock_name, holder_id, acquired_at, expires_at, metadata)
	VALUES (p_lock_name, p_holder_id, v_now, v_expires_at, p_metadata)
	ON CONFLICT (lock_name) DO UPDATE
	SET holder_id = EXCLUDED.holder_id, acquired_at = EXCLUDED.acquired_at, expires_at = EXCLUDED.expires_at
	WHERE distributed_locks.holder_id = p_holder_id OR distributed_locks.expires_at < v_now;
	RETURN EXISTS (SELECT 1 FROM seed_design.distributed_locks WHERE lock_name = p_lock_name AND holder_id = p_holder_id);
END; $$ LANGUAGE plpgsql;
CREATE FUNCTION seed_design.release_lock(p_lock_name VARCHAR(255), p_holder_id VARCHAR(255))
RETURNS BOOLEAN AS $$
BEGIN
	DELETE FROM seed_design.distributed_locks WHERE lock_name = p_lock_name AND holder_id = p_holder_id;
	RETURN FOUND;
END; $$ LANGUAGE plpgsql;`

// seedPollInterval is how the seed waits: a try every 100 ms.
const seedPollInterval = 100 * time.Millisecond

var seedDesign = design{
	name: "seed design",
	note: "the seed's `acquire_lock`/`release_lock` plpgsql functions (on `now()`, no token), a try every 100 ms to wait; a holder id per acquisition (the seed's per instance would let every goroutine of an instance in at once)",
	open: func(ctx context.Context, _ *env, pool *pgxpool.Pool) (locker, error) {
		return seedLocker{pool}, nil
	},
	peer: true,
}

type seedLocker struct{ pool *pgxpool.Pool }

func (s seedLocker) try(ctx context.Context, name string) (func(context.Context) error, error) {
	holder := nextHolder("seed")
	var acquired bool
	if err := s.pool.QueryRow(ctx, "SELECT seed_design.acquire_lock($1, $2, 30)", name, holder).Scan(&acquired); err != nil {
		return nil, err
	}
	if !acquired {
		return nil, errBusy
	}
	return func(ctx context.Context) error {
		_, err := s.pool.Exec(ctx, "SELECT seed_design.release_lock($1, $2)", name, holder)
		return err
	}, nil
}

func (s seedLocker) acquire(ctx context.Context, name string) (func(context.Context) error, error) {
	return poll(ctx, seedPollInterval, s.try, name)
}

func (seedLocker) close() {}
