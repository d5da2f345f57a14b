// Package ident names what pglock writes into the database on a process's behalf: the process
// itself (an instance, app@host:pid, shown to operators) and each acquisition, claim or attempt
// (a holder id of its own, so that two goroutines of one process are never taken for one
// holder).
package ident

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"unicode/utf8"
)

// Instance names this process as app@host:pid, at most 255 bytes. An empty app is the
// executable's base name. An app that is not UTF-8, or holds NUL, is refused: PostgreSQL text
// cannot hold it.
func Instance(app string) (string, error) {
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

// NewHolderID names one acquisition: 128 random bits, in hex.
func NewHolderID() string {
	b := make([]byte, 16)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// HoldsNUL reports whether JSON text has the escape \u0000 (not an escaped backslash followed
// by "u0000"): the one JSON string PostgreSQL's jsonb refuses.
func HoldsNUL(encoded []byte) bool {
	for rest := encoded; ; {
		i := bytes.Index(rest, []byte(`\u0000`))
		if i < 0 {
			return false
		}
		if backslashes := i - len(bytes.TrimRight(rest[:i], `\`)); backslashes%2 == 0 {
			return true
		}
		rest = rest[i+1:]
	}
}
