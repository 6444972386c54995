package connection

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/outpost-dev/terraform-provider-outpost/agent/internal/kubeclient"
)

// Exit codes of check-connection.
const (
	exitOK     = 0
	exitFailed = 1
	exitUsage  = 2
)

// CheckOptions say what a check reads and how recent a successful poll must be.
type CheckOptions struct {
	Namespace string
	LeaseName string
	// MaxAge is how long ago the last successful poll may be.
	MaxAge time.Duration
}

// errNoRecord: the Lease, or the record on it, does not exist (yet).
var errNoRecord = errors.New("no record")

// Check reads the record and returns it with nil when the agent reached the orchestrator within
// MaxAge and its latest poll did not fail; else an error that says what is wrong and what to do.
func Check(ctx context.Context, kube kubeclient.Interface, o CheckOptions, now time.Time) (Status, error) {
	lease, err := kube.CoordinationV1().Leases(o.Namespace).Get(ctx, o.LeaseName, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return Status{}, fmt.Errorf("%w: the Lease %s/%s does not exist: no agent of this release has started yet, or leader election has not run. "+
			"Check that the agent pods run (kubectl -n %s get pods) and read their log", errNoRecord, o.Namespace, o.LeaseName, o.Namespace)
	}
	if err != nil {
		return Status{}, fmt.Errorf("read the Lease %s/%s: %w", o.Namespace, o.LeaseName, err)
	}
	st, ok := StatusOf(lease.Annotations)
	if !ok {
		return st, fmt.Errorf("%w: the agent has not recorded a poll of the orchestrator on the Lease %s/%s yet: it may still be starting or waiting for its private key, "+
			"or be older than this chart. Check the agent pods (kubectl -n %s get pods) and their log", errNoRecord, o.Namespace, o.LeaseName, o.Namespace)
	}
	age := now.Sub(st.LastOK)
	if !st.LastOK.IsZero() && age <= o.MaxAge && !st.Failing() {
		return st, nil
	}
	var b strings.Builder
	switch {
	case st.LastOK.IsZero():
		fmt.Fprintf(&b, "the agent has never reached the orchestrator at %s", st.URL)
	case st.Failing():
		fmt.Fprintf(&b, "the agent reached the orchestrator at %s %s ago, but its latest poll failed", st.URL, roundAge(age))
	default:
		fmt.Fprintf(&b, "the agent last reached the orchestrator at %s %s ago, longer than %s", st.URL, roundAge(age), o.MaxAge)
	}
	if st.LastError != "" {
		fmt.Fprintf(&b, ".\nLast poll error (%s ago): %s", roundAge(now.Sub(st.LastErrorAt)), st.LastError)
	}
	fmt.Fprintf(&b, ".\nWhat to do: %s", advice(st.Kind, st.URL))
	if st.Instance != "" {
		fmt.Fprintf(&b, "\nRecorded by agent pod %s: kubectl -n %s logs %s", st.Instance, o.Namespace, st.Instance)
	}
	return st, errors.New(b.String())
}

// advice says what to do about an error of a kind.
func advice(kind, url string) string {
	switch kind {
	case KindTLS:
		return "the orchestrator's TLS certificate is not trusted by the agent: put the CA that signed it into a Secret and name it in caBundle.existingSecret."
	case KindRefused:
		return "the orchestrator refused the agent's signed requests: check that orgId and runnerId name a registered runner, and that the runner's public_keys " +
			"hold the public half of the private key in privateKey.existingSecret (after a key rotation, register the new public key)."
	case KindProtocol:
		return "the agent and the orchestrator speak no agent protocol version in common (the error names both releases): upgrade the older one."
	case KindAnswer:
		return fmt.Sprintf("something answered at %s, but with an error: check that apiUrl is the Outpost orchestrator's base URL (not a proxy, an ingress default backend or another service) and read the orchestrator's log.", url)
	default:
		return fmt.Sprintf("check that apiUrl (%s) is the orchestrator's address and that the agent pods can reach it: DNS, a firewall, "+
			"a NetworkPolicy's egress from the agent's namespace, and proxy.httpsProxy if the cluster reaches the internet through a proxy.", url)
	}
}

func roundAge(d time.Duration) time.Duration {
	if d < time.Second {
		return d.Round(time.Millisecond)
	}
	return d.Round(time.Second)
}

const checkUsage = `usage: outpost-agent check-connection --namespace NS --lease NAME [--max-age 2m] [--wait 60s] [--kubeconfig PATH]

Passes (exit 0) when the agent recorded on its Lease a successful poll of the orchestrator within
--max-age and its latest poll did not fail; waits up to --wait for that, then fails (exit 1) with
the orchestrator's URL, the last poll error and what to do. The chart's ` + "`helm test`" + ` runs it.
`

// Main is `outpost-agent check-connection`.
func Main(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("outpost-agent check-connection", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, checkUsage); fs.PrintDefaults() }
	var o CheckOptions
	var wait, every time.Duration
	var kubeconfig string
	fs.StringVar(&o.Namespace, "namespace", os.Getenv("OUTPOST_NAMESPACE"), "namespace of the agent and its Lease (env OUTPOST_NAMESPACE)")
	fs.StringVar(&o.LeaseName, "lease", "", "name of the agent's leader Lease (the chart's full name)")
	fs.DurationVar(&o.MaxAge, "max-age", 2*time.Minute, "how long ago the last successful poll may be")
	fs.DurationVar(&wait, "wait", 60*time.Second, "how long to wait for a successful poll to be recorded")
	fs.DurationVar(&every, "interval", 2*time.Second, "how often to read the Lease while waiting")
	fs.StringVar(&kubeconfig, "kubeconfig", os.Getenv("KUBECONFIG"), "kubeconfig path (empty: in-cluster)")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return exitOK
		}
		return exitUsage
	}
	switch {
	case fs.NArg() > 0:
		fmt.Fprintf(stderr, "outpost-agent check-connection: unexpected argument %q\n%s", fs.Arg(0), checkUsage)
		return exitUsage
	case o.Namespace == "" || o.LeaseName == "":
		fmt.Fprintf(stderr, "outpost-agent check-connection: --namespace and --lease are required\n%s", checkUsage)
		return exitUsage
	case o.MaxAge <= 0 || wait < 0 || every <= 0:
		fmt.Fprintf(stderr, "outpost-agent check-connection: --max-age and --interval must be positive, --wait not negative\n")
		return exitUsage
	}
	kube, err := kubeclient.New(kubeclient.Options{Kubeconfig: kubeconfig, UserAgent: "outpost-agent-check-connection"})
	if err != nil {
		fmt.Fprintf(stderr, "outpost-agent check-connection: %v\n", err)
		return exitFailed
	}
	return Wait(ctx, kube, o, wait, every, stdout, stderr)
}

// Wait runs Check until it passes or wait has passed, and prints the outcome.
func Wait(ctx context.Context, kube kubeclient.Interface, o CheckOptions, wait, every time.Duration, stdout, stderr io.Writer) int {
	deadline := time.Now().Add(wait)
	said := false
	for {
		st, err := Check(ctx, kube, o, time.Now())
		if err == nil {
			version := ""
			if st.Version != "" {
				version = " (release " + st.Version + ")"
			}
			fmt.Fprintf(stdout, "ok: the agent reached the orchestrator at %s%s %s ago (recorded by agent pod %s on the Lease %s/%s)\n",
				st.URL, version, roundAge(time.Since(st.LastOK)), st.Instance, o.Namespace, o.LeaseName)
			return exitOK
		}
		if time.Now().Add(every).After(deadline) || ctx.Err() != nil {
			fmt.Fprintf(stderr, "FAIL: %v\n", err)
			return exitFailed
		}
		if !said {
			said = true
			fmt.Fprintf(stdout, "waiting up to %s for the agent to record a successful poll of the orchestrator\n", wait)
		}
		select {
		case <-ctx.Done():
		case <-time.After(every):
		}
	}
}
