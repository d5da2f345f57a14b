package main

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func events(t *testing.T, list ...event) string {
	t.Helper()
	var b strings.Builder
	for _, e := range list {
		line, err := json.Marshal(e)
		require.NoError(t, err)
		b.Write(line)
		b.WriteByte('\n')
	}
	return b.String()
}

func TestTheReportEndsWithEachFailedTestAndWhatItSaid(t *testing.T) {
	t.Parallel()
	const pkg = "github.com/pglock/pglock/tablelock"
	in := events(t,
		event{Action: "output", Package: pkg, Test: "TestA", Output: "=== RUN   TestA\n"},
		event{Action: "output", Package: pkg, Test: "TestA", Output: "2026/11/27 ERROR pglock: lock lost lock=busy-7\n"},
		event{Action: "output", Package: pkg, Test: "TestA", Output: "    waiting_test.go:577: \n"},
		event{Action: "output", Package: pkg, Test: "TestA", Output: "        \tError:      \tReceived unexpected error: saturated\n"},
		event{Action: "output", Package: pkg, Test: "TestA", Output: "--- FAIL: TestA (1.12s)\n"},
		event{Action: "fail", Package: pkg, Test: "TestA", Elapsed: 1.12},
		event{Action: "output", Package: pkg, Test: "TestB/sub", Output: "    b_test.go:9: no\n"},
		event{Action: "fail", Package: pkg, Test: "TestB/sub", Elapsed: 0.5},
		event{Action: "fail", Package: pkg, Test: "TestB", Elapsed: 0.5},
		event{Action: "output", Package: pkg, Test: "TestC", Output: "    c_test.go:1: fine\n"},
		event{Action: "pass", Package: pkg, Test: "TestC"},
		event{Action: "fail", Package: pkg, Elapsed: 3},
	)
	var out strings.Builder
	require.NoError(t, report(&out, strings.NewReader(in)))
	got := out.String()
	require.Contains(t, got, "--- FAIL "+pkg+" TestA (1.12s)\n    waiting_test.go:577: \n        \tError:      \tReceived unexpected error: saturated\n")
	require.Contains(t, got, "--- FAIL "+pkg+" TestB/sub (0.50s)\n    b_test.go:9: no\n")
	require.NotContains(t, got, "ERROR pglock", "the logs of the code under test are left out")
	require.NotContains(t, got, "TestB (", "a parent is reported through its failed subtest")
	require.NotContains(t, got, "TestC")
	require.True(t, strings.HasSuffix(got, "FAIL "+pkg+" TestA\nFAIL "+pkg+" TestB/sub\n"), "the last lines name the failed tests:\n%s", got)
}

func TestAPackageFailedWithoutAFailedTestIsReportedWithItsPanic(t *testing.T) {
	t.Parallel()
	const pkg = "github.com/pglock/pglock/cron"
	in := events(t,
		event{Action: "output", Package: pkg, Test: "TestQuick", Output: "--- PASS: TestQuick (0.00s)\n"},
		event{Action: "pass", Package: pkg, Test: "TestQuick"},
		// What comes after a test's end is given to the last test that wrote.
		event{Action: "output", Package: pkg, Test: "TestQuick", Output: "panic: test timed out after 10m0s\n"},
		event{Action: "output", Package: pkg, Test: "TestQuick", Output: "\trunning tests:\n"},
		event{Action: "output", Package: pkg, Test: "TestQuick", Output: "\t\tTestSlow (10m0s)\n"},
		event{Action: "fail", Package: pkg, Elapsed: 600},
	)
	var out strings.Builder
	require.NoError(t, report(&out, strings.NewReader(in)))
	require.Contains(t, out.String(), "--- FAIL "+pkg+" (the package) (600.00s)\npanic: test timed out after 10m0s\n\trunning tests:\n\t\tTestSlow (10m0s)\n")
}
