package demo

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// failedPrefix starts the name of the directories that keep a failed run's logs. Down leaves
// them in place: a failure must stay explainable after the teardown.
const failedPrefix = "failed-"

// keepLogs copies what explains a failed run into a directory of its own under c.Dir: the
// demo's daemon logs, the test bed's component logs, and, while the cluster answers, every pod's
// log and the Warning events. The error returned points there.
func keepLogs(c *Config, cause error) error {
	dir := filepath.Join(c.Dir, failedPrefix+time.Now().UTC().Format("20060102T150405Z"))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("%w\n(keeping the logs failed too: %w)", cause, err)
	}
	var problems []string
	for _, src := range []struct{ from, to string }{
		{filepath.Join(c.Dir, "logs"), "demo"},
		{filepath.Join(c.testbedDir(), "logs"), "testbed"},
	} {
		if err := copyDir(src.from, filepath.Join(dir, src.to)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			problems = append(problems, err.Error())
		}
	}
	if err := dumpCluster(filepath.Join(c.testbedDir(), "kubeconfig"), filepath.Join(dir, "cluster")); err != nil {
		problems = append(problems, "pod logs: "+err.Error())
	}
	msg := fmt.Sprintf("%v\n\nThe logs of this run are kept in %s: demo/ (orchestrator, agent), testbed/ (Kubernetes and node components), cluster/ (every pod's log, Warning events). `make demo-down` leaves them there.", cause, dir)
	if len(problems) > 0 {
		msg += "\n(some could not be kept: " + strings.Join(problems, "; ") + ")"
	}
	return &keptLogsError{cause: cause, msg: msg}
}

// keptLogsError is a failure whose message also says where its logs are kept.
type keptLogsError struct {
	cause error
	msg   string
}

func (e *keptLogsError) Error() string { return e.msg }
func (e *keptLogsError) Unwrap() error { return e.cause }

// dumpCluster writes every pod's container logs and the cluster's Warning events into dir.
func dumpCluster(kubeconfig, dir string) error {
	if _, err := os.Stat(kubeconfig); err != nil {
		return nil // no test bed got that far
	}
	kc, err := kubeClient(kubeconfig)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	pods, err := kc.CoreV1().Pods("").List(ctx, metav1.ListOptions{})
	if err != nil {
		return fmt.Errorf("the cluster does not answer: %w", err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	var summary strings.Builder
	for _, p := range pods.Items {
		fmt.Fprintf(&summary, "%s/%s\t%s\tnode %q\n", p.Namespace, p.Name, p.Status.Phase, p.Spec.NodeName)
		for _, ctr := range append(append([]corev1.Container{}, p.Spec.InitContainers...), p.Spec.Containers...) {
			b, err := kc.CoreV1().Pods(p.Namespace).GetLogs(p.Name, &corev1.PodLogOptions{Container: ctr.Name, LimitBytes: ptr.To[int64](4 << 20)}).DoRaw(ctx)
			if err != nil {
				b = []byte("(no log: " + err.Error() + ")\n")
			}
			name := fmt.Sprintf("%s_%s_%s.log", p.Namespace, p.Name, ctr.Name)
			if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
				return err
			}
		}
	}
	evs, err := kc.CoreV1().Events("").List(ctx, metav1.ListOptions{FieldSelector: "type=Warning"})
	if err == nil {
		for _, ev := range evs.Items {
			fmt.Fprintf(&summary, "event %s/%s %s: %s\n", ev.Namespace, ev.InvolvedObject.Name, ev.Reason, ev.Message)
		}
	}
	return os.WriteFile(filepath.Join(dir, "pods-and-events.txt"), []byte(summary.String()), 0o644)
}

// copyDir copies the regular files under src to dst.
func copyDir(src, dst string) error {
	if _, err := os.Stat(src); err != nil {
		return err
	}
	return filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		target := filepath.Join(dst, rel)
		if d.IsDir() {
			return os.MkdirAll(target, 0o755)
		}
		if !d.Type().IsRegular() {
			return nil
		}
		in, err := os.Open(p)
		if err != nil {
			return err
		}
		defer in.Close()
		out, err := os.Create(target)
		if err != nil {
			return err
		}
		if _, err := io.Copy(out, in); err != nil {
			out.Close()
			return err
		}
		return out.Close()
	})
}
