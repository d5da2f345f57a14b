-- Fencing tokens: drawn from a sequence, with the server's timeline as an epoch, so that no token
-- repeats across a promotion.

-- The timeline this server writes WAL on: 1 for a cluster never promoted, one more with each
-- promotion. Read from the name of the WAL segment being written, which a promoted server
-- switches at once (Patroni reads it the same way); pg_control_checkpoint() would still say the
-- old one until the end-of-recovery checkpoint completes, minutes later when spread. The
-- argument must stay the volatile insert position: pg_walfile_name is IMMUTABLE, and a constant
-- one could be folded into a plan that keeps an old answer.
CREATE OR REPLACE FUNCTION pglock_timeline()
RETURNS bigint
LANGUAGE sql VOLATILE
AS $$
    SELECT ('x' || substr(pg_catalog.pg_walfile_name(pg_catalog.pg_current_wal_insert_lsn()), 1, 8))::bit(32)::bigint
$$;

REVOKE ALL ON FUNCTION pglock_timeline() FROM PUBLIC;

-- Moves p_seq to the first token of the next epoch that matches p_timeline (modulo 1024) unless
-- it is there already, and draws from it. A session-level advisory lock, released at once,
-- serializes the move (setval and nextval are not transactional: nothing needs it until
-- commit), so two sessions never move the sequence back.
CREATE OR REPLACE FUNCTION pglock_new_epoch(p_seq regclass, p_timeline bigint)
RETURNS bigint
LANGUAGE plpgsql VOLATILE
-- A sequence is read by a sequential scan only: under a caller's enable_seqscan = off its
-- estimated cost passed jit_above_cost, and the read took 70 ms of JIT compilation.
SET enable_seqscan = on
AS $$
DECLARE
    v_key   bigint := pg_catalog.hashtextextended('pglock_next_token', p_seq::oid::bigint);
    v_epoch bigint;
    v_step  bigint;
    v_token bigint;
BEGIN
    PERFORM pg_catalog.pg_advisory_lock(v_key);
    BEGIN
        EXECUTE pg_catalog.format('SELECT last_value >> 40 FROM %s', p_seq) INTO v_epoch;
        IF v_epoch = 0 OR v_epoch % 1024 <> p_timeline % 1024 THEN
            v_step := ((p_timeline - v_epoch) % 1024 + 1024) % 1024;
            IF v_step = 0 THEN
                v_step := 1024;
            END IF;
            PERFORM pg_catalog.setval(p_seq, (v_epoch + v_step) << 40);
        END IF;
        v_token := pg_catalog.nextval(p_seq);
    EXCEPTION WHEN OTHERS THEN
        PERFORM pg_catalog.pg_advisory_unlock(v_key);
        RAISE;
    END;
    PERFORM pg_catalog.pg_advisory_unlock(v_key);
    RETURN v_token;
END;
$$;

REVOKE ALL ON FUNCTION pglock_new_epoch(regclass, bigint) FROM PUBLIC;

-- The next fencing token from p_seq: larger than any drawn from it before, on this server or on
-- any it was promoted from. A token's high bits, from bit 40, are its epoch, which matches the
-- timeline modulo 1024: the first draw on a new timeline (a promotion, a point-in-time recovery,
-- a pg_upgrade or restore, which start again at timeline 1) finds the sequence in an epoch that
-- does not, and moves it to the next one that does (pglock_new_epoch), above every token any
-- earlier timeline drew, received here or not. Tokens drawn by v0.1.0, which had no epochs,
-- are in epoch 0. 2^40 tokens an epoch.
CREATE OR REPLACE FUNCTION pglock_next_token(p_seq regclass)
RETURNS bigint
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    v_token    bigint := pg_catalog.nextval(p_seq);
    v_timeline bigint := pglock_timeline();
BEGIN
    IF v_token >> 40 > 0 AND (v_token >> 40) % 1024 = v_timeline % 1024 THEN
        RETURN v_token;
    END IF;
    RETURN pglock_new_epoch(p_seq, v_timeline);
END;
$$;

REVOKE ALL ON FUNCTION pglock_next_token(regclass) FROM PUBLIC;
