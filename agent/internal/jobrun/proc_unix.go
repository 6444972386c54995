//go:build unix

package jobrun

import (
	"os"
	"syscall"
)

// cliSysProcAttr puts the CLI into its own process group (see runCLI).
func cliSysProcAttr() *syscall.SysProcAttr {
	attr := &syscall.SysProcAttr{Setpgid: true}
	setParentDeathSignal(attr)
	return attr
}

// interruptProcess asks the CLI to stop gracefully. Only the CLI itself gets SIGINT: it stops
// its providers in order; signalling the whole group would hit them mid-operation.
func interruptProcess(p *os.Process) error { return p.Signal(syscall.SIGINT) }

// killLeftovers kills what is left of the CLI's process group after the CLI exited, such as a
// local-exec command that Terraform abandoned on an interrupt. In a Pod the container's end
// would take them; under the process executor they would outlive the attempt, since the CLI's own
// group is out of reach of the executor's group kill. It reports whether anything was left.
func killLeftovers(p *os.Process) bool {
	return syscall.Kill(-p.Pid, syscall.SIGKILL) == nil
}

// killProcess kills the CLI's whole process group, providers included.
func killProcess(p *os.Process) error {
	if err := syscall.Kill(-p.Pid, syscall.SIGKILL); err != nil {
		return p.Kill()
	}
	return nil
}
