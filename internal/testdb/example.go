package testdb

import (
	"fmt"
	"slices"
	"testing"
)

// newUntested makes a migrated database on srv as New does, for a caller that has no test
// (Throwaway, the examples' database): the cleanups New would leave to the test are tb's to
// run, and a failure is an error, with what was made already undone.
func newUntested(srv *liveServer) (d *DB, tb *untestedTB, err error) {
	tb = &untestedTB{}
	defer func() {
		if v := recover(); v != nil { // untestedTB fails by panicking
			tb.cleanup()
			d, err = nil, fmt.Errorf("%v", v)
		}
	}()
	return newOn(tb, srv, &Options{}), tb, nil
}

// untestedTB is the part of testing.TB that newOn and NewPool use; the rest stays unimplemented.
type untestedTB struct {
	testing.TB
	cleanups []func()
}

func (*untestedTB) Helper()                           {}
func (e *untestedTB) Cleanup(f func())                { e.cleanups = append(e.cleanups, f) }
func (*untestedTB) Fatal(args ...any)                 { panic(fmt.Sprint(args...)) }
func (*untestedTB) Fatalf(format string, args ...any) { panic(fmt.Sprintf(format, args...)) }
func (*untestedTB) Errorf(format string, args ...any) { panic(fmt.Sprintf(format, args...)) }
func (*untestedTB) Skip(args ...any)                  { panic(fmt.Sprint(args...)) }

// cleanup runs the cleanups, last first, as a test's end would; one that fails does not stop
// the others.
func (e *untestedTB) cleanup() {
	for _, f := range slices.Backward(e.cleanups) {
		runRecovering(f)
	}
	e.cleanups = nil
}

// runRecovering runs f, ignoring a panic.
func runRecovering(f func()) {
	defer func() { recover() }()
	f()
}
