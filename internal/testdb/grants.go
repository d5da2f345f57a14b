package testdb

import "fmt"

// GrantLogSQL is the SQL that makes table a log of every fencing token tablelock grants (its
// columns: seq, name, token, at): a trigger on distributed_locks writes the row in the grant's
// own transaction, so a grant is in the log exactly when it committed. seq is drawn from
// sequence, which must exist, while the grant holds its lock's row: for one name, the log's
// order is the order the grants committed in. For evidence in tests that break things (the
// chaos suite, TestFailover); never for a production database.
func GrantLogSQL(table, sequence string) string {
	return fmt.Sprintf(`
CREATE TABLE %[1]s (
	seq   bigint      NOT NULL DEFAULT nextval('%[2]s'),
	name  text        NOT NULL,
	token bigint      NOT NULL,
	at    timestamptz NOT NULL DEFAULT clock_timestamp()
);
CREATE FUNCTION %[1]s_log() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
	IF TG_OP = 'INSERT' OR NEW.fencing_token IS DISTINCT FROM OLD.fencing_token THEN
		INSERT INTO %[1]s (name, token) VALUES (NEW.lock_name, NEW.fencing_token);
	END IF;
	RETURN NULL;
END $$;
CREATE TRIGGER %[1]s_log AFTER INSERT OR UPDATE OF fencing_token ON distributed_locks
	FOR EACH ROW EXECUTE FUNCTION %[1]s_log();`, table, sequence)
}
