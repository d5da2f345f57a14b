-- Names for advisory locks, and what sessions hold.

-- The key of a name, as the Go package computes it: the first 8 bytes of the SHA-256 of the
-- name (or of namespace, NUL, name), read as a big-endian bigint. A body in this form binds
-- what it calls now, as the migrating role resolves it, so every name is pg_catalog's.
CREATE OR REPLACE FUNCTION pglock_advisory_key(p_name text, p_namespace text DEFAULT '')
RETURNS bigint
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
RETURN ('x'::pg_catalog.text OPERATOR(pg_catalog.||) pg_catalog.substr(pg_catalog.encode(pg_catalog.sha256(
           CASE WHEN p_namespace OPERATOR(pg_catalog.=) ''::pg_catalog.text
                THEN pg_catalog.convert_to(p_name, 'UTF8'::pg_catalog.name)
                ELSE pg_catalog.convert_to(p_namespace, 'UTF8'::pg_catalog.name)
                     OPERATOR(pg_catalog.||) '\x00'::pg_catalog.bytea
                     OPERATOR(pg_catalog.||) pg_catalog.convert_to(p_name, 'UTF8'::pg_catalog.name) END
       ), 'hex'::pg_catalog.text), 1, 16))::pg_catalog."bit"(64)::pg_catalog.int8;

-- Records the name behind its key, once; returns the key.
CREATE OR REPLACE FUNCTION register_advisory_name(p_name text, p_namespace text DEFAULT '')
RETURNS bigint
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path FROM CURRENT
AS $$
DECLARE
    v_key bigint;
BEGIN
    IF p_name IS NULL OR p_name = '' OR length(p_name) > 255 THEN
        RAISE EXCEPTION 'p_name: must be 1 to 255 characters' USING ERRCODE = '22023', COLUMN = 'p_name';
    END IF;
    v_key := pglock_advisory_key(p_name, coalesce(p_namespace, ''));
    INSERT INTO advisory_lock_names (lock_key, namespace, name)
    VALUES (v_key, coalesce(p_namespace, ''), p_name)
    ON CONFLICT (lock_key) DO NOTHING;
    RETURN v_key;
END;
$$;

REVOKE ALL ON FUNCTION register_advisory_name(text, text) FROM PUBLIC;

-- Every advisory lock held or awaited in this database: its key (one bigint, or two ints when
-- pair), its registered name if any, the mode, whether it is granted or since when it is
-- awaited, the backend (pid, application, client address, session start) and the pids that
-- block a waiter. It runs with the caller's rights: seeing other roles' sessions takes
-- pg_read_all_stats.
CREATE OR REPLACE FUNCTION advisory_locks()
RETURNS TABLE (
    lock_key         bigint,
    pair             boolean,
    pair_namespace   integer,
    pair_id          integer,
    namespace        text,
    name             text,
    mode             text,
    granted          boolean,
    waiting_since    timestamptz,
    pid              integer,
    application_name text,
    client_addr      inet,
    backend_start    timestamptz,
    blocked_by       integer[]
)
LANGUAGE sql STABLE
SET search_path FROM CURRENT
AS $$
    SELECT CASE WHEN l.objsubid = 1 THEN (l.classid::bigint << 32) | l.objid::bigint END,
           l.objsubid = 2,
           CASE WHEN l.objsubid = 2 THEN (l.classid::bigint - CASE WHEN l.classid::bigint > 2147483647 THEN 4294967296 ELSE 0 END)::integer END,
           CASE WHEN l.objsubid = 2 THEN (l.objid::bigint - CASE WHEN l.objid::bigint > 2147483647 THEN 4294967296 ELSE 0 END)::integer END,
           n.namespace,
           n.name,
           CASE l.mode WHEN 'ExclusiveLock' THEN 'exclusive' WHEN 'ShareLock' THEN 'shared' ELSE l.mode END,
           l.granted,
           l.waitstart,
           l.pid,
           a.application_name,
           a.client_addr,
           a.backend_start,
           CASE WHEN NOT l.granted THEN pg_blocking_pids(l.pid) ELSE '{}' END
      FROM pg_locks l
      LEFT JOIN pg_stat_activity a ON a.pid = l.pid
      LEFT JOIN advisory_lock_names n
             ON l.objsubid = 1 AND n.lock_key = (l.classid::bigint << 32) | l.objid::bigint
     WHERE l.locktype = 'advisory'
       AND l.database = (SELECT d.oid FROM pg_database d WHERE d.datname = current_database())
     ORDER BY l.granted DESC, l.pid, l.objsubid, l.classid, l.objid, l.mode;
$$;

-- Whether the calling session holds an advisory lock, in the given mode: a bigint key
-- (p_key), or with p_pair the two ints (p_ns, p_id). pg_locks shows a bigint key as its high
-- and low 32 bits (objsubid 1), a pair as its two ints (objsubid 2), all as unsigned oids.
CREATE OR REPLACE FUNCTION pglock_session_holds_advisory(p_pair boolean, p_shared boolean, p_ns integer,
                                              p_id integer, p_key bigint)
RETURNS boolean
LANGUAGE sql STABLE
AS $$
    SELECT EXISTS (
        SELECT FROM pg_catalog.pg_locks l
         WHERE l.pid = pg_catalog.pg_backend_pid() AND l.locktype = 'advisory' AND l.granted
           AND l.database = (SELECT d.oid FROM pg_catalog.pg_database d WHERE d.datname = pg_catalog.current_database())
           AND l.mode = CASE WHEN p_shared THEN 'ShareLock' ELSE 'ExclusiveLock' END
           AND CASE WHEN p_pair
                    THEN l.objsubid = 2
                         AND l.classid::bigint = (p_ns::bigint & 4294967295)
                         AND l.objid::bigint = (p_id::bigint & 4294967295)
                    ELSE l.objsubid = 1
                         AND l.classid::bigint = ((p_key >> 32) & 4294967295)
                         AND l.objid::bigint = (p_key & 4294967295)
               END);
$$;
