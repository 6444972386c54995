//go:build !unix

package jobrun

import (
	"os"
	"syscall"
)

// Outside Unix (the job runner runs in Linux containers; this keeps the module building on
// developer machines) there are no process groups or SIGINT delivery: a stop request kills.
func cliSysProcAttr() *syscall.SysProcAttr { return nil }

func interruptProcess(p *os.Process) error { return p.Kill() }

func killProcess(p *os.Process) error { return p.Kill() }

func killLeftovers(*os.Process) bool { return false }
