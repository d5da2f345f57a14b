// Package errs builds the errors pglock's packages return, so that their text starts with
// "pglock: " exactly once, written by the outermost wrapper: Errorf writes the prefix and takes
// it off every error it wraps (a sentinel's text, another package's error), which errors.Is and
// errors.As still see whole.
package errs

import (
	"fmt"
	"strings"
)

// Prefix starts the text of every error pglock returns.
const Prefix = "pglock: "

// Errorf is fmt.Errorf with Prefix before format, and Prefix taken off the front of each error
// among args.
func Errorf(format string, args ...any) error {
	for i, arg := range args {
		if err, ok := arg.(error); ok && strings.HasPrefix(err.Error(), Prefix) {
			args[i] = unprefixed{err}
		}
	}
	return fmt.Errorf(Prefix+format, args...)
}

// unprefixed is err without Prefix in its text.
type unprefixed struct{ err error }

func (u unprefixed) Error() string { return strings.TrimPrefix(u.err.Error(), Prefix) }
func (u unprefixed) Unwrap() error { return u.err }
