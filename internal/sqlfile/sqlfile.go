// Package sqlfile splits PostgreSQL scripts into statements, for the tools that assemble
// pglock's migrations from the SQL people edit (internal/cmd/migrationgen) and for the migrator
// that re-creates an installed version's functions (migrations.Repair).
package sqlfile

import (
	"fmt"
	"regexp"
	"strings"
)

// Statement is one statement of a script, from its first word to its semicolon.
type Statement struct {
	Text string
}

// Split cuts script into its statements. It knows what may hide a semicolon: comments, quoted
// strings and identifiers, and dollar-quoted bodies. A script whose last statement has no
// semicolon, or that leaves a quote open, is an error.
func Split(script string) ([]Statement, error) {
	var (
		statements []Statement
		start      = -1 // where the current statement's text began
	)
	line := func(i int) int { return strings.Count(script[:i], "\n") + 1 }
	for i := 0; i < len(script); {
		c := script[i]
		switch {
		case c == '-' && strings.HasPrefix(script[i:], "--"):
			end := strings.IndexByte(script[i:], '\n')
			if end < 0 {
				end = len(script) - i
			} else {
				end++
			}
			i += end
		case c == '/' && strings.HasPrefix(script[i:], "/*"):
			end, err := blockCommentEnd(script, i)
			if err != nil {
				return nil, fmt.Errorf("line %d: %w", line(i), err)
			}
			i = end // before a statement, as a line comment, not part of it
		case c == '\'' || c == '"':
			if start < 0 {
				start = i
			}
			escapes := c == '\'' && i > 0 && (script[i-1] == 'E' || script[i-1] == 'e') && (i < 2 || !isIdent(script[i-2]))
			end, err := quotedEnd(script, i, c, escapes)
			if err != nil {
				return nil, fmt.Errorf("line %d: %w", line(i), err)
			}
			i = end
		case c == '$' && dollarTag.MatchString(script[i:]) && (i == 0 || !isIdent(script[i-1])):
			if start < 0 {
				start = i
			}
			tag := dollarTag.FindString(script[i:])
			end := strings.Index(script[i+len(tag):], tag)
			if end < 0 {
				return nil, fmt.Errorf("line %d: %s is never closed", line(i), tag)
			}
			i += len(tag) + end + len(tag)
		case c == ';':
			if start < 0 {
				return nil, fmt.Errorf("line %d: an empty statement", line(i))
			}
			statements = append(statements, Statement{Text: script[start : i+1]})
			start = -1
			i++
		case c == ' ' || c == '\t' || c == '\n' || c == '\r':
			i++
		default:
			if start < 0 {
				start = i
			}
			i++
		}
	}
	if start >= 0 {
		return nil, fmt.Errorf("line %d: the last statement has no semicolon", line(start))
	}
	return statements, nil
}

// dollarTag matches the opening of a dollar-quoted string ($$, $body$); $1 is a parameter.
var dollarTag = regexp.MustCompile(`^\$([A-Za-z_][A-Za-z0-9_]*)?\$`)

func isIdent(c byte) bool {
	return c == '_' || c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= 0x80
}

// quotedEnd is the index after the quote that closes the one at i; a doubled quote is part of
// the text, and so is a backslash's next character in an E” string.
func quotedEnd(script string, i int, quote byte, escapes bool) (int, error) {
	for j := i + 1; j < len(script); j++ {
		switch {
		case escapes && script[j] == '\\':
			j++
		case script[j] == quote && j+1 < len(script) && script[j+1] == quote:
			j++
		case script[j] == quote:
			return j + 1, nil
		}
	}
	return 0, fmt.Errorf("%c is never closed", quote)
}

// blockCommentEnd is the index after the */ that closes the /* at i; they nest.
func blockCommentEnd(script string, i int) (int, error) {
	depth := 0
	for j := i; j+1 < len(script); j++ {
		switch script[j : j+2] {
		case "/*":
			depth++
			j++
		case "*/":
			depth--
			j++
			if depth == 0 {
				return j + 1, nil
			}
		}
	}
	return 0, fmt.Errorf("/* is never closed")
}

// functionStatement matches what makes a function or says who may call it. Not ALTER FUNCTION:
// a rename or a move belongs to a version's changes, and could not run twice.
var functionStatement = regexp.MustCompile(`(?is)^(CREATE\s+(OR\s+REPLACE\s+)?FUNCTION|(GRANT|REVOKE)\s.*\sON\s+FUNCTION\s|COMMENT\s+ON\s+FUNCTION)\b`)

// IsFunction says whether s creates or replaces a function, grants or revokes its EXECUTE, or
// comments on it.
func (s Statement) IsFunction() bool { return functionStatement.MatchString(s.Text) }

var createFunction = regexp.MustCompile(`(?i)^CREATE\s+FUNCTION\b`)

// CreatesOnly says whether s is a CREATE FUNCTION without OR REPLACE, which fails where the
// function exists.
func (s Statement) CreatesOnly() bool { return createFunction.MatchString(s.Text) }

// Replacing is s with CREATE FUNCTION turned into CREATE OR REPLACE FUNCTION: the same
// function, made again over whatever body is installed.
func (s Statement) Replacing() Statement {
	s.Text = createFunction.ReplaceAllString(s.Text, "CREATE OR REPLACE FUNCTION")
	return s
}

// Functions is what makes script's functions again: each of its statements that makes a
// function or says who may call it, in order, made with CREATE OR REPLACE, each followed by a
// blank line.
func Functions(script string) (string, error) {
	statements, err := Split(script)
	if err != nil {
		return "", err
	}
	var b strings.Builder
	for _, s := range statements {
		if s.IsFunction() {
			b.WriteString(s.Replacing().Text)
			b.WriteString("\n\n")
		}
	}
	return b.String(), nil
}
