// Package kubeclient builds the Kubernetes client of every agent command (`outpost-agent` and
// `outpost-agent state`), so that --kubeconfig means the same in all of them: a kubeconfig path,
// or a list of paths joined like $KUBECONFIG (merged the way kubectl merges them); empty means
// the pod's in-cluster credentials.
package kubeclient

import (
	"fmt"
	"path/filepath"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

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
func New(o Options) (kubernetes.Interface, error) {
	rc, err := Config(o)
	if err != nil {
		return nil, err
	}
	return kubernetes.NewForConfig(rc)
}
