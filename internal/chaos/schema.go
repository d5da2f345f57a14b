package main

// The evidence the workers leave and the checker reads. Every timestamp is the database's clock.
const evidenceSchema = `
CREATE TABLE chaos_writes (            -- every fenced write of the critical sections
	seq    bigserial   PRIMARY KEY,       -- drawn under the fence: the order writes to a name committed in
	name   text        NOT NULL,
	token  bigint      NOT NULL,
	worker text        NOT NULL,
	kind   text        NOT NULL CHECK (kind IN ('enter', 'write', 'leave', 'stale')),
	at     timestamptz NOT NULL DEFAULT clock_timestamp()
);
CREATE TABLE chaos_stale_attempts (
	kind     text    NOT NULL,       -- lock or leader
	worker   text    NOT NULL,
	token    bigint  NOT NULL,
	accepted boolean NOT NULL
);
CREATE TABLE chaos_ticks (
	tick   timestamptz NOT NULL,
	worker text        NOT NULL,
	token  bigint      NOT NULL
);
CREATE TABLE chaos_effects (
	key    text NOT NULL,
	worker text NOT NULL
);
CREATE TABLE chaos_leader_writes (
	seq    bigserial PRIMARY KEY,    -- drawn under the fence, as chaos_writes.seq
	term   bigint NOT NULL,
	worker text   NOT NULL,
	stale  boolean NOT NULL
);`
