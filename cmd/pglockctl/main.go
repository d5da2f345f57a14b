// Command pglockctl is the operator's view of pglock: who holds which lock, since when, until
// when, who waits; and the controls to migrate, force-release and collect garbage.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/pglock/pglock/internal/errs"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// The exit codes.
const (
	exitOK      = 0
	exitFailure = 1 // something went wrong, or (release without --force) nothing was done
	exitUsage   = 2 // the command line is wrong
	exitDrift   = 3 // migrate status: pglock's objects differ from what their version made
)

// run executes one command line and returns its exit code. Errors are one line on stderr.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	root := newRoot(stdout)
	root.SetArgs(args)
	root.SetOut(stdout)
	root.SetErr(stderr)
	err := root.ExecuteContext(ctx)
	if err == nil {
		return exitOK
	}
	// pglockctl is the outermost wrapper of the library's errors: it says "pglockctl: ", once.
	message := strings.Join(strings.Fields(strings.TrimPrefix(err.Error(), errs.Prefix)), " ")
	var drifted driftError
	if errors.As(err, &drifted) {
		return exitDrift // the status said what differs
	}
	var coded exitError
	if errors.As(err, &coded) {
		fmt.Fprintf(stderr, "pglockctl: %s\n", message)
		return coded.code
	}
	var usage usageError
	if errors.As(err, &usage) || strings.HasPrefix(err.Error(), "unknown command") {
		fmt.Fprintf(stderr, "pglockctl: %s (see pglockctl --help)\n", message)
		return exitUsage
	}
	fmt.Fprintf(stderr, "pglockctl: %s\n", message)
	return exitFailure
}

// driftError ends a status that found drift, after printing it.
type driftError struct{ count int }

func (e driftError) Error() string { return fmt.Sprintf("%d objects differ", e.count) }

// usageError marks an error in the command line itself.
type usageError struct{ error }

func (e usageError) Unwrap() error { return e.error }

func usagef(format string, args ...any) error { return usageError{fmt.Errorf(format, args...)} }

// args wraps a cobra argument check so that its failures count as usage errors.
func args(check cobra.PositionalArgs) cobra.PositionalArgs {
	return func(cmd *cobra.Command, a []string) error {
		if err := check(cmd, a); err != nil {
			return usageError{err}
		}
		return nil
	}
}
