package jobrun

import "syscall"

// setParentDeathSignal makes the kernel kill the CLI if the job runner dies without being able
// to forward anything (SIGKILL, OOM kill): an orphaned CLI in its own process group would
// otherwise keep running, holding the state lock, after the Job or process is gone.
func setParentDeathSignal(attr *syscall.SysProcAttr) { attr.Pdeathsig = syscall.SIGKILL }
