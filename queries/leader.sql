-- Leader elections (package leader): an election's leader is the holder of the table lock named
-- 'pglock.leader/' || election; its term is the lock's fencing token.

-- ListLeaders lists the elections with a live leader or a waiting candidate; candidates counts
-- the live places in the lock's queue.
-- name: ListLeaders :many
SELECT n.lock_name::varchar                AS lock_name,
       l.holder_id, l.instance, l.fencing_token, l.acquired_at, l.expires_at,
       (SELECT count(*) FROM distributed_lock_waiters w
         WHERE w.lock_name = n.lock_name AND w.expires_at > clock_timestamp())::bigint AS candidates,
       clock_timestamp()::timestamptz       AS now
  FROM (SELECT d.lock_name FROM distributed_locks d
         WHERE d.lock_name LIKE 'pglock.leader/%' AND d.expires_at > clock_timestamp()
        UNION
        SELECT w.lock_name FROM distributed_lock_waiters w
         WHERE w.lock_name LIKE 'pglock.leader/%' AND w.expires_at > clock_timestamp()) AS n
  LEFT JOIN distributed_locks l ON l.lock_name = n.lock_name AND l.expires_at > clock_timestamp()
 ORDER BY n.lock_name;

-- GetLeader reads one election's leader and candidates: a primary-key read and a count.
-- name: GetLeader :one
SELECT l.holder_id, l.instance, l.fencing_token, l.acquired_at, l.expires_at,
       (SELECT count(*) FROM distributed_lock_waiters w
         WHERE w.lock_name = @lock_name AND w.expires_at > clock_timestamp())::bigint AS candidates,
       clock_timestamp()::timestamptz AS now
  FROM distributed_locks l
 WHERE l.lock_name = @lock_name AND l.expires_at > clock_timestamp();
