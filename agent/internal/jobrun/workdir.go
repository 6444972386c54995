package jobrun

// What the job runner keeps in its pod: the work directory, the CLI's version for the log, the
// termination message Kubernetes reads, and the hint for a spec it could not fetch.

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/outpost-dev/terraform-provider-outpost/agent/internal/jobenv"
	"github.com/outpost-dev/terraform-provider-outpost/internal/api"
)

// prepareWorkDir creates the work directory. A directory the job runner chose itself is removed
// afterwards; one given by OUTPOST_WORK_DIR belongs to whoever set it (the process executor
// cleans it up after the finished event, and may keep files of its own there).
func prepareWorkDir(dir, deploymentID string) (string, func(), error) {
	if dir != "" {
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return "", nil, fmt.Errorf("create the work directory: %w", err)
		}
		return dir, func() {}, nil
	}
	dir = filepath.Join(os.TempDir(), "outpost-job-"+deploymentID)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", nil, fmt.Errorf("create the work directory: %w", err)
	}
	return dir, func() { _ = os.RemoveAll(dir) }, nil
}

func specHint(err error) string {
	switch {
	case errors.Is(err, api.ErrUnauthorized):
		return " (the orchestrator refused the job token: it expired, or the deployment already finished)"
	case errors.Is(err, api.ErrNotFound):
		return " (the orchestrator does not know this deployment)"
	case errors.Is(err, api.ErrUnavailable):
		return " (is " + jobenv.APIURL + " reachable from the job runner?)"
	}
	return ""
}

// cliVersion is the first line of `<cli> version` for the log header ("Terraform v1.11.4"), or
// the binary's name when that fails; a CLI that hangs here is given up on after 15 s.
func cliVersion(path string) string {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, path, "version")
	cmd.Env = append(os.Environ(), "CHECKPOINT_DISABLE=1")
	out, err := cmd.Output()
	line, _, _ := strings.Cut(string(out), "\n")
	if err != nil || strings.TrimSpace(line) == "" {
		return filepath.Base(path)
	}
	return strings.TrimSpace(line)
}

func since(t time.Time) time.Duration { return time.Since(t).Round(100 * time.Millisecond) }

// writeTerminationMessage leaves msg where Kubernetes takes a container's termination message
// from, so the agent's finished event says why the job runner failed (the file exists only in a
// pod; the process executor has none).
func writeTerminationMessage(path, msg string) {
	if path == "" {
		return
	}
	if _, err := os.Stat(path); err != nil {
		return
	}
	// Kubernetes keeps at most 4096 bytes of it.
	if len(msg) > 4000 {
		msg = msg[:4000] + "…"
	}
	_ = os.WriteFile(path, []byte(msg), 0o644)
}
