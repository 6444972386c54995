//go:build unix && !linux

package jobrun

import "syscall"

// setParentDeathSignal: only Linux has a parent-death signal; elsewhere an orphaned CLI is
// left to its own lock timeout.
func setParentDeathSignal(*syscall.SysProcAttr) {}
