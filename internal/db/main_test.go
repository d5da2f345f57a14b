package db_test

import (
	"testing"

	"github.com/pglock/pglock/internal/testdb"
)

func TestMain(m *testing.M) { testdb.Main(m) }
