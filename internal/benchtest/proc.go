package benchtest

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// Usage is a process's resident memory and the CPU time it used so far, from /proc.
type Usage struct {
	RSS int64 // bytes
	CPU time.Duration
	At  time.Time
}

// clockTick is the kernel's USER_HZ, the unit of utime and stime in /proc/<pid>/stat; Linux
// fixes it at 100 for user space.
const clockTick = 100

// ReadUsage reads pid's usage from /proc.
func ReadUsage(pid int) (Usage, error) {
	u := Usage{At: time.Now()}
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return u, err
	}
	for _, l := range strings.Split(string(status), "\n") {
		if rest, ok := strings.CutPrefix(l, "VmRSS:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 10, 64)
			if err != nil {
				return u, fmt.Errorf("VmRSS of %d: %w", pid, err)
			}
			u.RSS = kb << 10
		}
	}
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return u, err
	}
	// The command name (field 2) may hold spaces; the fields after its closing parenthesis are
	// state, ppid, ... with utime and stime the 12th and 13th.
	s := string(stat)
	fields := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(fields) < 13 {
		return u, fmt.Errorf("/proc/%d/stat: %d fields", pid, len(fields))
	}
	utime, err1 := strconv.ParseInt(fields[11], 10, 64)
	stime, err2 := strconv.ParseInt(fields[12], 10, 64)
	if err1 != nil || err2 != nil {
		return u, fmt.Errorf("/proc/%d/stat: utime %q stime %q", pid, fields[11], fields[12])
	}
	u.CPU = time.Duration(utime+stime) * time.Second / clockTick
	return u, nil
}

// CPUShare is the CPU a process used between two readings, as a fraction of one core.
func CPUShare(from, to Usage) float64 {
	wall := to.At.Sub(from.At)
	if wall <= 0 {
		return 0
	}
	return float64(to.CPU-from.CPU) / float64(wall)
}

// MiB is bytes in MiB.
func MiB(b int64) float64 { return float64(b) / (1 << 20) }
