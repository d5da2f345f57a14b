package testdb

import (
	"testing"
	"time"
)

// Receive returns the next value from c, failing the test if none comes within 30 s: where a
// broken property would hang, the test fails instead, and no timing is asserted.
func Receive[T any](t testing.TB, c <-chan T) T {
	t.Helper()
	select {
	case v := <-c:
		return v
	case <-time.After(30 * time.Second):
		t.Fatal("testdb: nothing came within 30 s")
		panic("unreachable")
	}
}
