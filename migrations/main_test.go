package migrations_test

import (
	"testing"

	"github.com/pglock/pglock/internal/testdb"
)

func TestMain(m *testing.M) {
	if runMigrateUpHelper() {
		return
	}
	testdb.Main(m)
}
