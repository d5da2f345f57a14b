package testdb

import (
	"fmt"
	"slices"
	"testing"
)

// Example returns a database as New makes one, for a runnable Example function (which has no
// testing.TB), and the function that drops it; where New would fail or skip, it panics.
func Example() (d *DB, done func()) {
	tb := &exampleTB{}
	d = New(tb, nil)
	return d, func() {
		for _, cleanup := range slices.Backward(tb.cleanups) {
			cleanup()
		}
	}
}

// exampleTB is the part of testing.TB that New and NewPool use; the rest stays unimplemented.
type exampleTB struct {
	testing.TB
	cleanups []func()
}

func (*exampleTB) Helper()                           {}
func (e *exampleTB) Cleanup(f func())                { e.cleanups = append(e.cleanups, f) }
func (*exampleTB) Fatal(args ...any)                 { panic(fmt.Sprint(args...)) }
func (*exampleTB) Fatalf(format string, args ...any) { panic(fmt.Sprintf(format, args...)) }
func (*exampleTB) Errorf(format string, args ...any) { panic(fmt.Sprintf(format, args...)) }
func (*exampleTB) Skip(args ...any)                  { panic(fmt.Sprint(args...)) }
