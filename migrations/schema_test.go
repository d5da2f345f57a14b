package migrations_test

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pglock/pglock/internal/testdb"
	"github.com/pglock/pglock/migrations"
)

var update = flag.Bool("update", false, "write schema/*.txt from databases migrated to each version (make generate)")

// What each version installs, as Version compares it, is what a database migrated to that
// version holds: make generate writes it, and make check-generated fails when it is stale.
func TestSchemaManifestsAreCurrent(t *testing.T) {
	t.Parallel()
	for version := uint(1); version <= migrations.Latest(); version++ {
		t.Run(fmt.Sprintf("version %d", version), func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			d := testdb.New(t, &testdb.Options{Unmigrated: true})
			require.NoError(t, migrations.Up(ctx, d.Pool))
			if version < migrations.Latest() {
				require.NoError(t, migrations.Down(ctx, d.Pool, int(migrations.Latest()-version)))
			}
			got, err := migrations.Manifest(ctx, d.Pool, version)
			require.NoError(t, err)
			path := filepath.Join("schema", fmt.Sprintf("%06d.txt", version))
			if *update {
				require.NoError(t, os.WriteFile(path, []byte(got), 0o644))
				return
			}
			want, err := os.ReadFile(path)
			require.NoError(t, err, "run make generate")
			require.Equal(t, string(want), got, "%s is stale: run make generate and commit the result", path)
		})
	}
}
