package redislock

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"unicode/utf8"
)

// What follows is redislock's own copy of three small pieces of the root module's internals
// (internal/errs and internal/ident), so that a published redislock builds against any root
// module of its major version: a copy is smaller here than a public API for them would be.

// errorf is fmt.Errorf with "pglock: " before format, and taken off the front of each error
// among args, so that an error's text says "pglock: " once, as every pglock package's does.
func errorf(format string, args ...any) error {
	for i, arg := range args {
		if err, ok := arg.(error); ok && strings.HasPrefix(err.Error(), prefix) {
			args[i] = unprefixed{err}
		}
	}
	return fmt.Errorf(prefix+format, args...)
}

const prefix = "pglock: "

// unprefixed is err without the prefix in its text; errors.Is and errors.As still see it whole.
type unprefixed struct{ err error }

func (u unprefixed) Error() string { return strings.TrimPrefix(u.err.Error(), prefix) }
func (u unprefixed) Unwrap() error { return u.err }

// instanceName names this process as app@host:pid (an empty app: the executable's base name),
// at most 255 bytes, as every pglock package shows it to operators.
func instanceName(app string) (string, error) {
	if app == "" {
		exe, _ := os.Executable()
		app = strings.ToValidUTF8(filepath.Base(exe), "?")
	}
	if !utf8.ValidString(app) || strings.ContainsRune(app, 0) {
		return "", errors.New("must be UTF-8 without NUL")
	}
	host, _ := os.Hostname()
	instance := fmt.Sprintf("%s@%s:%d", app, host, os.Getpid())
	if len(instance) > 255 {
		instance = strings.ToValidUTF8(instance[:255], "") // drops a character cut in two
	}
	return instance, nil
}

// newHolderID names one acquisition or waiter: 128 random bits, in hex.
func newHolderID() string {
	b := make([]byte, 16)
	rand.Read(b)
	return hex.EncodeToString(b)
}
