package testdb

import (
	"os/exec"
	"runtime"
	"syscall"
)

// StartChild starts cmd so that it receives SIGQUIT (PostgreSQL's immediate shutdown; a Go
// program's exit) if this process dies first, and closes exited once it has exited and been
// waited for (cmd.ProcessState says how). The kernel sends the signal when the thread that
// started the child exits, so that thread stays locked to a goroutine that lives exactly as
// long as the child.
func StartChild(cmd *exec.Cmd) (exited <-chan struct{}, err error) {
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Pdeathsig = syscall.SIGQUIT
	started := make(chan error, 1)
	done := make(chan struct{})
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		if err := cmd.Start(); err != nil {
			started <- err
			return
		}
		started <- nil
		cmd.Wait()
		close(done)
	}()
	return done, <-started
}
