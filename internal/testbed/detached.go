package testbed

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// stateFile, in a detached test bed's Dir, records its processes so StopDir can stop them from
// another process (`outpost-testbed down`).
const stateFile = "testbed.json"

// detachedState is the content of stateFile.
type detachedState struct {
	Kubeconfig string            `json:"kubeconfig"`
	Host       string            `json:"host"`
	Jobs       bool              `json:"jobs"`
	Started    time.Time         `json:"started"`
	Processes  []detachedProcess `json:"processes"`
	Node       *detachedNode     `json:"node,omitempty"`
	// MoreNodes are the real nodes after the first (Options.Nodes).
	MoreNodes []detachedNode `json:"moreNodes,omitempty"`
}

// detachedNode is what StopDir and Reuse need to know about a detached test bed's real node.
type detachedNode struct {
	HostIP           string    `json:"hostIP"`
	ContainerdSocket string    `json:"containerdSocket"`
	Registry         *Registry `json:"registry,omitempty"` // for Reuse; the file is readable by its owner only
	nodeLeftovers              // cleaned up by StopDir
}

// detachedProcess identifies one process: the pid, and the executable so a pid reused by an
// unrelated program after a reboot is never signalled.
type detachedProcess struct {
	Name string `json:"name"`
	Pid  int    `json:"pid"`
	Exe  string `json:"exe"`
}

func (c *Cluster) writeState() error {
	st := detachedState{Kubeconfig: c.Kubeconfig, Host: c.Host, Jobs: c.Jobs, Started: time.Now().UTC()}
	for i, n := range c.nodes {
		dn := detachedNode{HostIP: c.HostIP, ContainerdSocket: n.files.socket, nodeLeftovers: n.leftovers()}
		if i == 0 {
			dn.Registry = c.Registry
			st.Node = &dn
		} else {
			st.MoreNodes = append(st.MoreNodes, dn)
		}
	}
	for _, p := range c.procs {
		st.Processes = append(st.Processes, detachedProcess{Name: p.name, Pid: p.cmd.Process.Pid, Exe: cmp.Or(p.exe, p.cmd.Path)})
	}
	b, err := json.MarshalIndent(st, "", "  ")
	if err != nil {
		return err
	}
	tmp := c.path(stateFile + ".tmp")
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, c.path(stateFile))
}

// DetachedStatus describes the detached test bed recorded in a directory.
type DetachedStatus struct {
	Kubeconfig string    // path of its kubeconfig
	Host       string    // API server URL
	Started    time.Time // when it was started
	Running    []string  // components still running
	Stopped    []string  // components no longer running
}

// StatusDir reads the detached test bed recorded in dir. It returns (nil, nil) when dir holds
// none, so `outpost-testbed up` can tell "nothing there" from "there, but broken".
func StatusDir(dir string) (*DetachedStatus, error) {
	st, err := readState(dir)
	if err != nil || st == nil {
		return nil, err
	}
	s := &DetachedStatus{Kubeconfig: st.Kubeconfig, Host: st.Host, Started: st.Started}
	for _, p := range st.Processes {
		if ours(p) {
			s.Running = append(s.Running, p.Name)
		} else {
			s.Stopped = append(s.Stopped, p.Name)
		}
	}
	return s, nil
}

func readState(dir string) (*detachedState, error) {
	b, err := os.ReadFile(filepath.Join(dir, stateFile))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var st detachedState
	if err := json.Unmarshal(b, &st); err != nil {
		return nil, fmt.Errorf("reading %s: %w (remove the directory by hand if nothing is running)", filepath.Join(dir, stateFile), err)
	}
	return &st, nil
}

// ours reports whether the process p recorded is still alive and still runs the recorded binary.
func ours(p detachedProcess) bool {
	if !processAlive(p.Pid) {
		return false
	}
	exe, err := os.Readlink("/proc/" + strconv.Itoa(p.Pid) + "/exe")
	if err != nil {
		return false
	}
	// A rebuilt binary shows as "<path> (deleted)" for processes started before the rebuild.
	return strings.TrimSuffix(exe, " (deleted)") == p.Exe
}

// StopDir stops the detached test bed recorded in dir (started with Options{Dir: dir, Detach:
// true}) and removes dir. It is idempotent: with nothing recorded or nothing running it only
// removes what is left. It returns an error if a process survives SIGKILL.
func StopDir(dir string) error {
	st, err := readState(dir)
	if err != nil {
		return err
	}
	if st != nil {
		var alive []detachedProcess
		for i := len(st.Processes) - 1; i >= 0; i-- {
			p := st.Processes[i]
			if ours(p) {
				_ = syscall.Kill(-p.Pid, syscall.SIGTERM) // the process group: each is a session leader
				alive = append(alive, p)
			}
		}
		deadline := time.Now().Add(stopGrace)
		for _, p := range alive {
			for ours(p) && time.Now().Before(deadline) {
				time.Sleep(50 * time.Millisecond)
			}
			if ours(p) {
				_ = syscall.Kill(-p.Pid, syscall.SIGKILL)
			}
		}
		var survivors []string
		for _, p := range alive {
			for i := 0; i < 100 && ours(p); i++ {
				time.Sleep(50 * time.Millisecond)
			}
			if ours(p) {
				survivors = append(survivors, fmt.Sprintf("%s (pid %d)", p.Name, p.Pid))
			}
		}
		if len(survivors) > 0 {
			return fmt.Errorf("testbed: still running after SIGKILL: %s", strings.Join(survivors, ", "))
		}
		if st.Node != nil {
			if err := removeNodeLeftovers(st.Node.nodeLeftovers); err != nil {
				return err
			}
		}
		for _, n := range st.MoreNodes {
			if err := removeNodeLeftovers(n.nodeLeftovers); err != nil {
				return err
			}
		}
	}
	if err := os.RemoveAll(dir); err != nil {
		return fmt.Errorf("testbed: removing %s: %w", dir, err)
	}
	return nil
}
