package testdb

import "testing"

// A server's port comes from below the ephemeral range, which the kernel hands to the local end
// of outgoing connections (from 32768 by Linux's default): one of those cannot take it before
// the server binds it.
func TestFreePortIsBelowTheEphemeralRange(t *testing.T) {
	t.Parallel()
	for range 50 {
		port, err := FreePort()
		if err != nil {
			t.Fatal(err)
		}
		if port < 10000 || port >= 32768 {
			t.Fatalf("port %d is not in [10000, 32768)", port)
		}
	}
}
