package testdb

import (
	"fmt"
	"testing"
)

// exampleTB is the part of testing.TB that newOn and NewPool use, for callers that have no test
// (Throwaway, the examples' database); the rest stays unimplemented.
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
