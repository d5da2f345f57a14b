package sqlfile

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestSplitFindsEachStatementWhateverHidesASemicolon(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		script string
		want   []Statement
	}{
		{"plain", "SELECT 1;\nSELECT 2;\n", []Statement{{Text: "SELECT 1;"}, {Text: "SELECT 2;"}}},
		{"comments above are not the statement's", "-- one\n-- two;\n\nSELECT 1;", []Statement{{Text: "SELECT 1;"}}},
		{"a comment inside", "SELECT 1 -- ;\n;", []Statement{{Text: "SELECT 1 -- ;\n;"}}},
		{"a block comment, nested", "SELECT /* ; /* ; */ ; */ 1;", []Statement{{Text: "SELECT /* ; /* ; */ ; */ 1;"}}},
		{"a block comment above is not the statement's", "/* a; b */\nCREATE FUNCTION f();", []Statement{{Text: "CREATE FUNCTION f();"}}},
		{"a string with a doubled quote", "SELECT 'it''s; fine';", []Statement{{Text: "SELECT 'it''s; fine';"}}},
		{"an escape string", `SELECT E'\';', 1;`, []Statement{{Text: `SELECT E'\';', 1;`}}},
		{"a standard string ending in a backslash", `SELECT '\'; SELECT 2;`, []Statement{{Text: `SELECT '\';`}, {Text: "SELECT 2;"}}},
		{"a quoted identifier", `SELECT 1 AS "a;b";`, []Statement{{Text: `SELECT 1 AS "a;b";`}}},
		{"a dollar-quoted body", "CREATE FUNCTION f() RETURNS int LANGUAGE sql AS $$ SELECT 1; $$;",
			[]Statement{{Text: "CREATE FUNCTION f() RETURNS int LANGUAGE sql AS $$ SELECT 1; $$;"}}},
		{"a tagged body holding $$", "DO $body$ BEGIN PERFORM '$$;'; END $body$;", []Statement{{Text: "DO $body$ BEGIN PERFORM '$$;'; END $body$;"}}},
		{"a parameter is no quote", "SELECT $1; SELECT 2;", []Statement{{Text: "SELECT $1;"}, {Text: "SELECT 2;"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, err := Split(tc.script)
			require.NoError(t, err)
			require.Equal(t, tc.want, got)
		})
	}
}

func TestSplitRefusesAScriptItCannotEnd(t *testing.T) {
	t.Parallel()
	for _, script := range []string{"SELECT 1", "SELECT 'open;", `SELECT "open;`, "SELECT $$ open;", "/* open", ";"} {
		_, err := Split(script)
		require.Error(t, err, script)
	}
}

func TestFunctionStatementsAreMadeAgainInPlace(t *testing.T) {
	t.Parallel()
	for text, isFunction := range map[string]bool{
		"CREATE FUNCTION f() RETURNS int LANGUAGE sql AS $$ SELECT 1 $$;":            true,
		"CREATE OR REPLACE FUNCTION f() RETURNS int LANGUAGE sql AS $$ SELECT 1 $$;": true,
		"REVOKE ALL ON FUNCTION f() FROM PUBLIC;":                                    true,
		"GRANT EXECUTE ON FUNCTION f() TO app;":                                      true,
		"COMMENT ON FUNCTION f() IS 'x';":                                            true,
		"ALTER FUNCTION f() RENAME TO g;":                                            false,
		"CREATE TABLE functions (id int);":                                           false,
		"DROP FUNCTION f();":                                                         false,
		"REVOKE ALL ON TABLE t FROM PUBLIC;":                                         false,
	} {
		require.Equal(t, isFunction, Statement{Text: text}.IsFunction(), text)
	}
	require.Equal(t, "CREATE OR REPLACE FUNCTION f() RETURNS int LANGUAGE sql AS $$ SELECT 1 $$;",
		Statement{Text: "CREATE FUNCTION f() RETURNS int LANGUAGE sql AS $$ SELECT 1 $$;"}.Replacing().Text)
	require.True(t, Statement{Text: "CREATE\nFUNCTION f();"}.CreatesOnly())
	require.False(t, Statement{Text: "CREATE OR REPLACE FUNCTION f();"}.CreatesOnly())

	functions, err := Functions("CREATE TABLE t (id int);\n/* f */ CREATE FUNCTION f() RETURNS int LANGUAGE sql AS $$ SELECT 1; $$;\n" +
		"REVOKE ALL ON FUNCTION f() FROM PUBLIC;\nSELECT f();\nALTER FUNCTION f() RENAME TO g;\n")
	require.NoError(t, err)
	require.Equal(t, "CREATE OR REPLACE FUNCTION f() RETURNS int LANGUAGE sql AS $$ SELECT 1; $$;\n\nREVOKE ALL ON FUNCTION f() FROM PUBLIC;\n\n", functions)
}
