package migrations_test

import (
	"bufio"
	"crypto/sha256"
	"encoding/hex"
	"io/fs"
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pglock/pglock/migrations"
)

// A migration, once released, never changes: databases that applied it would differ from those
// that apply the new text, and golang-migrate would never tell. released.sha256 (sha256sum's
// format, so `sha256sum -c released.sha256` checks it too) pins every released file; a release
// adds its new files to it.
func TestReleasedMigrationsNeverChange(t *testing.T) {
	t.Parallel()
	list, err := os.Open("released.sha256")
	require.NoError(t, err)
	defer list.Close()
	pinned := 0
	lines := bufio.NewScanner(list)
	for lines.Scan() {
		want, file, ok := strings.Cut(lines.Text(), "  ")
		require.True(t, ok, "a line of released.sha256 is not %q: %q", "<sha256>  <file>", lines.Text())
		content, err := fs.ReadFile(migrations.FS, file)
		require.NoError(t, err, "released migration %s is gone", file)
		sum := sha256.Sum256(content)
		require.Equal(t, want, hex.EncodeToString(sum[:]),
			"%s was released and must never change: add a new migration instead", file)
		pinned++
	}
	require.NoError(t, lines.Err())
	require.NotZero(t, pinned, "released.sha256 pins nothing")
}
