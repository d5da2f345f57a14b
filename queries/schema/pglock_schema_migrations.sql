-- golang-migrate creates this table (migrations.Up names it); described here only so sqlc can
-- type the query that reads it.
CREATE TABLE pglock_schema_migrations (
    version bigint  NOT NULL PRIMARY KEY,
    dirty   boolean NOT NULL
);
