package ops_test

import (
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pglock/pglock/internal/ops"
)

// Grants is docs/sql.md's least-privilege grants: the same functions and tables, no more, no
// fewer.
func TestGrantsAreTheDocumentedOnes(t *testing.T) {
	t.Parallel()
	doc, err := os.ReadFile("../../docs/sql.md")
	require.NoError(t, err)
	_, block, found := strings.Cut(string(doc), "A least-privilege application role needs only:\n\n```sql\n")
	require.True(t, found, "docs/sql.md has lost its grants")
	block, _, _ = strings.Cut(block, "```")
	block = regexp.MustCompile(`--[^\n]*`).ReplaceAllString(block, "")
	block = strings.Join(strings.Fields(block), " ")

	var documentedFunctions, documentedTables []string
	for _, m := range regexp.MustCompile(`pglock\.([a-z_]+\([^)]*\))`).FindAllStringSubmatch(block, -1) {
		documentedFunctions = append(documentedFunctions, strings.ReplaceAll(m[1], "( ", "("))
	}
	for _, m := range regexp.MustCompile(`GRANT SELECT ON ([^;]*) TO`).FindAllStringSubmatch(block, -1) {
		for _, table := range strings.Split(m[1], ",") {
			documentedTables = append(documentedTables, strings.TrimPrefix(strings.TrimSpace(table), "pglock."))
		}
	}
	var functions, tables []string
	for _, g := range ops.Grants {
		functions = append(functions, g.Functions...)
		tables = append(tables, g.Tables...)
	}
	set := func(s []string) []string { s = slices.Clone(s); slices.Sort(s); return slices.Compact(s) }
	require.Equal(t, set(documentedFunctions), set(functions))
	require.Equal(t, set(documentedTables), set(tables))
	require.Greater(t, len(set(functions)), 50, "the parse found the grants")
}
