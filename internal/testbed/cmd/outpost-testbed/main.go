// Command outpost-testbed starts and stops a local Kubernetes test bed (etcd, kube-apiserver,
// kube-controller-manager, kube-scheduler and kwok, built by `make testbed-build`) that keeps
// running in the background, for trying the agent and chart by hand and for running one package's
// tests repeatedly without paying the start-up each time.
//
//	outpost-testbed up   [--dir DIR]   start it (or report the running one) and print how to use it
//	outpost-testbed down [--dir DIR]   stop it and remove its files; idempotent
//	outpost-testbed status [--dir DIR] say whether it runs
//
// DIR defaults to ${OUTPOST_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/outpost}/testbed-run.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/outpost-dev/terraform-provider-outpost/internal/testbed"
)

func main() {
	if err := run(os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintf(os.Stderr, "outpost-testbed: %v\n", err)
		os.Exit(1)
	}
}

const usage = `usage: outpost-testbed up|down|status [--dir DIR]

  up      start a test bed with Jobs in the background and print its kubeconfig
  down    stop it and remove its files (does nothing if none runs)
  status  say whether one runs
`

func run(args []string, out io.Writer) error {
	if len(args) == 0 || strings.HasPrefix(args[0], "-") {
		fmt.Fprint(os.Stderr, usage)
		return errors.New("missing command: up, down or status")
	}
	cmd := args[0]
	fs := flag.NewFlagSet("outpost-testbed "+cmd, flag.ContinueOnError)
	dir := fs.String("dir", "", "state directory of the test bed (default: <cache>/outpost/testbed-run)")
	if err := fs.Parse(args[1:]); err != nil {
		return err
	}
	if *dir == "" {
		d, err := defaultDir()
		if err != nil {
			return err
		}
		*dir = d
	}
	abs, err := filepath.Abs(*dir)
	if err != nil {
		return err
	}
	switch cmd {
	case "up":
		return up(abs, out)
	case "down":
		return down(abs, out)
	case "status":
		return status(abs, out)
	default:
		fmt.Fprint(os.Stderr, usage)
		return fmt.Errorf("unknown command %q: want up, down or status", cmd)
	}
}

func defaultDir() (string, error) {
	if d := os.Getenv("OUTPOST_CACHE"); d != "" {
		return filepath.Join(d, "testbed-run"), nil
	}
	d, err := os.UserCacheDir()
	if err != nil {
		return "", fmt.Errorf("%w; pass --dir", err)
	}
	return filepath.Join(d, "outpost", "testbed-run"), nil
}

func up(dir string, out io.Writer) error {
	st, err := testbed.StatusDir(dir)
	if err != nil {
		return err
	}
	if st != nil && len(st.Stopped) == 0 {
		if _, err := testbed.Reuse(context.Background(), st.Kubeconfig); err == nil {
			fmt.Fprintf(out, "A test bed is already running (started %s).\n", st.Started.Local().Format(time.Stamp))
			printUsage(out, st.Kubeconfig, dir)
			return nil
		}
	}
	if st != nil {
		// Partly dead or not answering: clear it away and start afresh.
		fmt.Fprintf(out, "Removing a test bed that is no longer healthy (stopped: %v).\n", st.Stopped)
		if err := testbed.StopDir(dir); err != nil {
			return err
		}
	} else if entries, _ := os.ReadDir(dir); len(entries) > 0 {
		if err := os.RemoveAll(dir); err != nil {
			return err
		}
	}

	fmt.Fprintln(out, "Starting etcd, kube-apiserver, kube-controller-manager, kube-scheduler and kwok...")
	start := time.Now()
	// Ctrl-C while starting ends the start-up, which stops what it had started.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, 4*time.Minute)
	defer cancel()
	c, err := testbed.Start(ctx, testbed.Options{Jobs: true, Dir: dir, Detach: true})
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "Test bed ready in %s (Kubernetes %s, API server %s).\n", time.Since(start).Round(100*time.Millisecond), testbed.KubernetesVersion, c.Host)
	printUsage(out, c.Kubeconfig, dir)
	return nil
}

func printUsage(out io.Writer, kubeconfig, dir string) {
	fmt.Fprintf(out, `
  kubeconfig: %[1]s
  logs:       %[2]s/logs/

  export KUBECONFIG=%[1]s                    # kubectl / helm against it
  export OUTPOST_TESTBED_KUBECONFIG=%[1]s    # go test reuses it instead of starting its own

Pods run on a fake node (kwok): they complete after ~1s, or fail with exit code N when annotated
%[3]s: "N". Stop it with: make testbed-down
`, kubeconfig, dir, testbed.ExitCodeAnnotation)
}

func down(dir string, out io.Writer) error {
	st, err := testbed.StatusDir(dir)
	if err != nil {
		return err
	}
	if err := testbed.StopDir(dir); err != nil {
		return err
	}
	switch {
	case st == nil:
		fmt.Fprintln(out, "No test bed was running.")
	case len(st.Running) == 0:
		fmt.Fprintf(out, "No test bed was running; removed the files of a stopped one in %s.\n", dir)
	default:
		fmt.Fprintf(out, "Stopped the test bed (%s) and removed %s.\n", strings.Join(st.Running, ", "), dir)
	}
	return nil
}

func status(dir string, out io.Writer) error {
	st, err := testbed.StatusDir(dir)
	if err != nil {
		return err
	}
	switch {
	case st == nil:
		fmt.Fprintln(out, "No test bed is running. Start one with: make testbed-up")
	case len(st.Stopped) > 0:
		fmt.Fprintf(out, "The test bed in %s is broken: running %v, stopped %v. Restart it with: make testbed-down testbed-up\n", dir, st.Running, st.Stopped)
	default:
		fmt.Fprintf(out, "A test bed is running (started %s).\n", st.Started.Local().Format(time.Stamp))
		printUsage(out, st.Kubeconfig, dir)
	}
	return nil
}
