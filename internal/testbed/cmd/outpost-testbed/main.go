// Command outpost-testbed starts and stops a local Kubernetes test bed (etcd, kube-apiserver,
// kube-controller-manager, kube-scheduler and kwok, and with --node a real node, all built by
// `make testbed-build`) that keeps running in the background, for trying the agent and chart by
// hand and for running one package's tests repeatedly without paying the start-up each time.
//
//	outpost-testbed up   [--dir DIR] [--node]  start it (or report the running one) and print how to use it
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

const usage = `usage: outpost-testbed up|down|status [--dir DIR] [--node]

  up      start a test bed with Jobs in the background and print its kubeconfig;
          --node also runs a real node (containerd, kubelet, kube-proxy, CoreDNS; needs root)
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
	node := fs.Bool("node", false, "up: also run a real node, so Pods really run (needs root)")
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
		return up(abs, *node, out)
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

func up(dir string, node bool, out io.Writer) error {
	st, err := testbed.StatusDir(dir)
	if err != nil {
		return err
	}
	if st != nil && len(st.Stopped) == 0 {
		if c, err := testbed.Reuse(context.Background(), st.Kubeconfig); err == nil {
			if node && !c.Node {
				return errors.New("a test bed without a real node is running; stop it first (make testbed-down)")
			}
			fmt.Fprintf(out, "A test bed is already running (started %s).\n", st.Started.Local().Format(time.Stamp))
			printUsage(out, c, dir)
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

	parts := "etcd, kube-apiserver, kube-controller-manager, kube-scheduler and kwok"
	if node {
		parts = "etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kwok and a real node " +
			"(containerd, kubelet, kube-proxy, CoreDNS) with an OCI registry"
	}
	fmt.Fprintf(out, "Starting %s...\n", parts)
	start := time.Now()
	// Ctrl-C while starting ends the start-up, which stops what it had started.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, 4*time.Minute)
	defer cancel()
	c, err := testbed.Start(ctx, testbed.Options{Jobs: true, Node: node, Dir: dir, Detach: true})
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "Test bed ready in %s (Kubernetes %s, API server %s).\n", time.Since(start).Round(100*time.Millisecond), testbed.KubernetesVersion, c.Host)
	printUsage(out, c, dir)
	return nil
}

func printUsage(out io.Writer, c *testbed.Cluster, dir string) {
	fmt.Fprintf(out, `
  kubeconfig: %[1]s
  logs:       %[2]s/logs/

  export KUBECONFIG=%[1]s                    # kubectl / helm against it
  export OUTPOST_TESTBED_KUBECONFIG=%[1]s    # go test reuses it instead of starting its own

Pods run on a fake node (kwok): they complete after ~1s, or fail with exit code N when annotated
%[3]s: "N".
`, c.Kubeconfig, dir, testbed.ExitCodeAnnotation)
	if c.Node {
		fmt.Fprintf(out, `Pods that tolerate the taint %[1]s and select node %[2]s run for real on
node %[2]s (images: %[3]s, %[4]s; import more with
ctr --address %[5]s -n k8s.io images import ARCHIVE). Pods reach this machine at %[6]s.
`, testbed.RealNodeTaint, testbed.RealNodeName, testbed.PauseImage, testbed.ToolboxImage,
			filepath.Join(dir, "node", "containerd.sock"), c.HostIP)
		fmt.Fprintf(out, `The node pulls images from the registry at %[1]s (HTTPS, CA %[2]s) with an
imagePullSecret logging in as %[3]s (the password is node.registry.Password in %[4]s).
`, c.Registry.Host, filepath.Join(dir, "pki", "ca.crt"), c.Registry.Username, filepath.Join(dir, "testbed.json"))
	}
	fmt.Fprintln(out, "Stop it with: make testbed-down")
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
		c, err := testbed.Reuse(context.Background(), st.Kubeconfig)
		if err != nil {
			return err
		}
		printUsage(out, c, dir)
	}
	return nil
}
