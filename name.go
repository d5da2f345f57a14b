package pglock

import (
	"fmt"
	"strings"
	"unicode/utf8"
)

// MaxNameLen is the longest lock name, in bytes. The SQL contract counts up to 255 characters,
// so every name accepted here is accepted there too.
const MaxNameLen = 255

// ValidateName reports whether name can be a lock name: 1 to MaxNameLen bytes of valid UTF-8
// without NUL bytes (which PostgreSQL text cannot hold). The error wraps ErrInvalidName.
func ValidateName(name string) error {
	switch {
	case name == "":
		return fmt.Errorf("%w: empty", ErrInvalidName)
	case len(name) > MaxNameLen:
		return fmt.Errorf("%w: %d bytes, the limit is %d, starting %.40q", ErrInvalidName, len(name), MaxNameLen, name)
	case !utf8.ValidString(name):
		return fmt.Errorf("%w: not valid UTF-8: %q", ErrInvalidName, name)
	case strings.IndexByte(name, 0) >= 0:
		return fmt.Errorf("%w: contains a NUL byte: %q", ErrInvalidName, name)
	}
	return nil
}
