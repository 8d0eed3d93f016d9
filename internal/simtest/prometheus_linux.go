package simtest

import (
	"os/exec"
	"syscall"
)

// dieWithTest has the kernel kill Prometheus if the test binary dies (a panic, a timeout)
// before its cleanup runs, so that no server the tests started outlives them.
func dieWithTest(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
