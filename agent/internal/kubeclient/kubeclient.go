// Package kubeclient builds the Kubernetes client of every agent command (`outpost-agent` and
// `outpost-agent state`), so that --kubeconfig means the same in all of them: a kubeconfig path,
// or a list of paths joined like $KUBECONFIG (merged the way kubectl merges them); empty means
// the pod's in-cluster credentials.
package kubeclient

import (
	"fmt"
	"path/filepath"
	"time"

	batchv1 "k8s.io/client-go/kubernetes/typed/batch/v1"
	coordinationv1 "k8s.io/client-go/kubernetes/typed/coordination/v1"
	corev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/util/flowcontrol"
)

// Interface is the part of the Kubernetes API the agent uses: Jobs, the core group (Secrets,
// Pods and their logs), and Leases. Through client-go's kubernetes.Interface the typed client of
// every API group stayed reachable and in the binary, whose pages are most of the agent's
// resident memory when idle; through this one the linker keeps these three (agent
// TestBinaryLinksOnlyTheClientsItUses). client-go's fake clientset satisfies it, for unit tests.
type Interface interface {
	BatchV1() batchv1.BatchV1Interface
	CoreV1() corev1.CoreV1Interface
	CoordinationV1() coordinationv1.CoordinationV1Interface
}

// Clientset is the Interface the agent's commands build, the three typed clients over one
// HTTP client (one connection pool and one rate limiter).
type Clientset struct {
	batch        *batchv1.BatchV1Client
	core         *corev1.CoreV1Client
	coordination *coordinationv1.CoordinationV1Client
}

// BatchV1 returns the client of Jobs.
func (c *Clientset) BatchV1() batchv1.BatchV1Interface { return c.batch }

// CoreV1 returns the client of the core group.
func (c *Clientset) CoreV1() corev1.CoreV1Interface { return c.core }

// CoordinationV1 returns the client of Leases.
func (c *Clientset) CoordinationV1() coordinationv1.CoordinationV1Interface { return c.coordination }

// NewForConfig builds the three typed clients from rc, sharing one HTTP client and, as
// client-go's clientset does, one rate limiter.
func NewForConfig(rc *rest.Config) (*Clientset, error) {
	rc = rest.CopyConfig(rc)
	if rc.RateLimiter == nil && rc.QPS > 0 {
		if rc.Burst <= 0 {
			return nil, fmt.Errorf("kubernetes client: burst must be positive when QPS is set")
		}
		rc.RateLimiter = flowcontrol.NewTokenBucketRateLimiter(rc.QPS, rc.Burst)
	}
	hc, err := rest.HTTPClientFor(rc)
	if err != nil {
		return nil, fmt.Errorf("kubernetes client: %w", err)
	}
	var c Clientset
	if c.batch, err = batchv1.NewForConfigAndClient(rc, hc); err != nil {
		return nil, fmt.Errorf("kubernetes client: %w", err)
	}
	if c.core, err = corev1.NewForConfigAndClient(rc, hc); err != nil {
		return nil, fmt.Errorf("kubernetes client: %w", err)
	}
	if c.coordination, err = coordinationv1.NewForConfigAndClient(rc, hc); err != nil {
		return nil, fmt.Errorf("kubernetes client: %w", err)
	}
	return &c, nil
}

// Options say how to reach the cluster.
type Options struct {
	// Kubeconfig is the value of --kubeconfig: one path (which must exist), a list of paths
	// joined with the OS's list separator (missing ones are skipped, as kubectl does), or empty
	// for in-cluster credentials.
	Kubeconfig string
	// QPS and Burst bound the client's request rate; 0 keeps client-go's defaults.
	QPS   float32
	Burst int
	// Limiter, when set, is the client's rate limit instead of QPS and Burst (the agent's, whose
	// burst follows the runner's max_concurrency).
	Limiter *Limiter
	// UserAgent names the command in the API server's audit log.
	UserAgent string
	// Timeout bounds every request; 0 for none. The agent leaves it 0 because its watches are
	// long-lived; an operator's command sets it, so a wedged API server cannot hang a shell.
	Timeout time.Duration
}

// Config resolves the options to a REST config.
func Config(o Options) (*rest.Config, error) {
	var rc *rest.Config
	var err error
	switch paths := filepath.SplitList(o.Kubeconfig); {
	case len(paths) == 1:
		rc, err = clientcmd.NewNonInteractiveDeferredLoadingClientConfig(
			&clientcmd.ClientConfigLoadingRules{ExplicitPath: paths[0]}, &clientcmd.ConfigOverrides{}).ClientConfig()
	case len(paths) > 1:
		rc, err = clientcmd.NewNonInteractiveDeferredLoadingClientConfig(
			&clientcmd.ClientConfigLoadingRules{Precedence: paths}, &clientcmd.ConfigOverrides{}).ClientConfig()
	default:
		rc, err = rest.InClusterConfig()
	}
	if err != nil {
		return nil, fmt.Errorf("kubernetes client config (outside a cluster, set --kubeconfig): %w", err)
	}
	if o.QPS > 0 {
		rc.QPS = o.QPS
	}
	if o.Burst > 0 {
		rc.Burst = o.Burst
	}
	if o.Limiter != nil {
		rc.RateLimiter = o.Limiter
	}
	rc.UserAgent = o.UserAgent
	rc.Timeout = o.Timeout
	return rc, nil
}

// New returns a client built from the options.
func New(o Options) (Interface, error) {
	rc, err := Config(o)
	if err != nil {
		return nil, err
	}
	c, err := NewForConfig(rc)
	if err != nil {
		return nil, err // not a nil *Clientset in a non-nil Interface
	}
	return c, nil
}
