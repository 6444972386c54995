package testbed

import (
	"errors"
	"fmt"
	"syscall"
)

// Pause freezes a component of the test bed (by name: "etcd", "kube-apiserver",
// "kube-controller-manager", "kube-scheduler", "kwok") and everything it forked, with SIGSTOP to
// its process group, for fault tests: a paused etcd is an API server whose storage hangs without
// failing, as in a real outage. It returns resume, which sends SIGCONT; call it exactly once
// (also when the test fails, with t.Cleanup). A reused or detached test bed has no processes of
// this test's own to pause: Pause then returns an error.
func (c *Cluster) Pause(component string) (resume func() error, err error) {
	if c.detached || c.procs == nil {
		return nil, errors.New("testbed: Pause needs a test bed this test process started (not a reused or detached one)")
	}
	var p *process
	for _, q := range c.procs {
		if q.name == component {
			p = q
		}
	}
	if p == nil {
		return nil, fmt.Errorf("testbed: no component %q", component)
	}
	pgid := -p.cmd.Process.Pid
	if err := syscall.Kill(pgid, syscall.SIGSTOP); err != nil {
		return nil, fmt.Errorf("testbed: pause %s: %w", component, err)
	}
	return func() error {
		if err := syscall.Kill(pgid, syscall.SIGCONT); err != nil {
			return fmt.Errorf("testbed: resume %s: %w", component, err)
		}
		return nil
	}, nil
}
