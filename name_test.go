package pglock_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pglock/pglock"
)

func TestValidateName(t *testing.T) {
	t.Parallel()

	tests := []struct {
		name  string
		input string
		valid bool
	}{
		{"simple", "order:123", true},
		{"unicode", "commande:é→✓", true},
		{"max length", strings.Repeat("a", pglock.MaxNameLen), true},
		{"max length in multibyte runes", strings.Repeat("é", pglock.MaxNameLen/2), true},
		{"empty", "", false},
		{"one byte over", strings.Repeat("a", pglock.MaxNameLen+1), false},
		{"multibyte over in bytes though not in runes", strings.Repeat("é", 200), false},
		{"invalid UTF-8", "order:\xff", false},
		{"NUL byte", "order:\x00123", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			err := pglock.ValidateName(tt.input)
			if tt.valid {
				require.NoError(t, err)
				return
			}
			require.ErrorIs(t, err, pglock.ErrInvalidName)
		})
	}
}
