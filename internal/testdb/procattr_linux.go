package testdb

import (
	"os/exec"
	"runtime"
	"syscall"
)

func childProcAttr(owner *ownerIDs) *syscall.SysProcAttr {
	attr := &syscall.SysProcAttr{}
	if owner != nil {
		attr.Credential = &syscall.Credential{Uid: owner.Uid, Gid: owner.Gid}
	}
	return attr
}

// startChild starts cmd so that it receives SIGQUIT (PostgreSQL's immediate shutdown) if this
// process dies first. The kernel sends it when the thread that started the child exits, so that
// thread stays locked to a goroutine that lives exactly as long as the child.
func startChild(cmd *exec.Cmd) (exited <-chan struct{}, err error) {
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
