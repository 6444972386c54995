package process

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"syscall"
)

// WrapperCommand is the hidden subcommand of outpost-agent that supervises the process of one
// attempt.
const WrapperCommand = "process-wrapper"

// exitCodeFile is written by the wrapper when the command ends; its presence means "finished".
const exitCodeFile = "exit-code"

// WrapperMain runs `outpost-agent process-wrapper <attempt dir> -- <command...>`: it starts the
// command, passes SIGTERM/SIGINT on, and writes the exit code to <attempt dir>/exit-code when the
// command ends. The wrapper, not the agent, is the command's parent, so the exit code is recorded
// even when the agent was restarted in between, and a new agent reads it from the file.
func WrapperMain(args []string) int {
	if len(args) < 3 || args[1] != "--" {
		fmt.Fprintln(os.Stderr, "usage: outpost-agent process-wrapper <attempt dir> -- <command> [args...]")
		return 2
	}
	dir, argv := args[0], args[2:]
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP)
	cmd := exec.CommandContext(context.Background(), argv[0], argv[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = nil, os.Stdout, os.Stderr
	code := 0
	if err := cmd.Start(); err != nil {
		fmt.Fprintf(os.Stderr, "outpost-agent process-wrapper: start %s: %v\n", argv[0], err)
		code = 127
	} else {
		done := make(chan struct{})
		go func() {
			for {
				select {
				case s := <-sigs:
					// SIGHUP arrives when the agent's terminal goes away; it must not stop the attempt.
					if s != syscall.SIGHUP {
						_ = cmd.Process.Signal(s)
					}
				case <-done:
					return
				}
			}
		}()
		err := cmd.Wait()
		close(done)
		code = exitCode(err)
	}
	if err := writeAtomic(filepath.Join(dir, exitCodeFile), []byte(strconv.Itoa(code)+"\n")); err != nil {
		fmt.Fprintf(os.Stderr, "outpost-agent process-wrapper: record exit code: %v\n", err)
	}
	return code
}

// exitCode turns a Wait error into a shell-style exit code (128+signal when killed).
func exitCode(err error) int {
	if err == nil {
		return 0
	}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			return 128 + int(ws.Signal())
		}
		return ee.ExitCode()
	}
	return 1
}

// writeAtomic writes a private (0600) file so readers never see half of it.
func writeAtomic(path string, data []byte) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}
