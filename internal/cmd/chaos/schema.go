package main

import "github.com/pglock/pglock/internal/testdb"

// The evidence the workers leave and the checker reads. Every timestamp is the database's
// clock. One sequence orders grants (chaos_grants, testdb.GrantLogSQL) and writes: a grant
// draws its number while it holds the lock's row, and a fenced write while its fence holds
// that row, so for one name the numbers follow the order in which those transactions
// committed.
var evidenceSchema = `
CREATE SEQUENCE chaos_order;` + testdb.GrantLogSQL("chaos_grants", "chaos_order") + `
CREATE TABLE chaos_writes (              -- every write of the critical sections
	seq    bigint      NOT NULL DEFAULT nextval('chaos_order'),
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
	key    text        NOT NULL,
	worker text        NOT NULL,
	at     timestamptz NOT NULL DEFAULT clock_timestamp()
);
CREATE TABLE chaos_leader_writes (
	seq    bigint      NOT NULL DEFAULT nextval('chaos_order'),
	term   bigint      NOT NULL,
	worker text        NOT NULL,
	stale  boolean     NOT NULL,
	at     timestamptz NOT NULL DEFAULT clock_timestamp()
);
CREATE TABLE chaos_places (              -- visits under a tenant's place and a global one, taken together
	seq    bigint      NOT NULL DEFAULT nextval('chaos_order'),
	token  bigint      NOT NULL,           -- the global place's
	tenant text        NOT NULL,
	worker text        NOT NULL,
	kind   text        NOT NULL CHECK (kind IN ('enter', 'leave')),
	at     timestamptz NOT NULL DEFAULT clock_timestamp()
);
CREATE TABLE chaos_marks (               -- the controller's: when faults ended, when workers were asked to stop, when they had
	mark text        PRIMARY KEY CHECK (mark IN ('faults_ended', 'stopping', 'stopped')),
	at   timestamptz NOT NULL DEFAULT clock_timestamp()
);`
