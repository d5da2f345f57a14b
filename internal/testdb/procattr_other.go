//go:build unix && !linux

package testdb

import (
	"os/exec"
	"syscall"
)

// StartChild starts cmd. Outside Linux nothing stops the server if this process is killed
// before Main stops it.
func StartChild(cmd *exec.Cmd) (exited <-chan struct{}, err error) {
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	done := make(chan struct{})
	go func() {
		cmd.Wait()
		close(done)
	}()
	return done, nil
}
