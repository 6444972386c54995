package statebackend

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"sync"
	"time"

	"github.com/outpost-dev/terraform-provider-outpost/agent/internal/kubeclient"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Forwarder sends state-backend requests that reach a standby replica on to the leader. Both
// replicas are ready (so rollouts and drains are not blocked), the Service spreads job pods'
// requests over both, and only the leader holds the grants that authorise a request (see
// package jobtoken) and renews the locks it granted. The leader is found from the election (its
// identity is its pod name) and reached at its pod IP.
type Forwarder struct {
	kube      kubeclient.Interface
	namespace string
	port      string
	self      string
	// tlsPort and tlsConfig, when set, make the forwarder reach a leader that serves TLS (its pod
	// declares the container port TLSPortName) over TLS on tlsPort.
	tlsPort   string
	tlsConfig *tls.Config
	transport *http.Transport

	mu      sync.Mutex
	leader  string
	target  *url.URL
	leading bool
}

// NewForwarder returns the forwarder of replica self (its pod name) in namespace; listen is the
// state backend's listen address, whose port the leader's pod serves it on too.
func NewForwarder(kube kubeclient.Interface, namespace, self, listen string) *Forwarder {
	_, port, err := net.SplitHostPort(listen)
	if err != nil || port == "" {
		port = "8080"
	}
	return &Forwarder{kube: kube, namespace: namespace, port: port, self: self}
}

// TLSPortName is the name of the agent container's TLS state port. A leader pod that declares it
// serves TLS; one that does not is an agent of the previous release, reached in plain HTTP while
// a rollout replaces it.
const TLSPortName = "state-tls"

// UseTLS makes the forwarder reach leaders that serve TLS over TLS on listen's port, trusting
// cfg (the state backend's CA, the Service's name).
func (f *Forwarder) UseTLS(cfg *tls.Config, listen string) {
	_, port, err := net.SplitHostPort(listen)
	if err != nil || port == "" {
		port = "8443"
	}
	f.tlsPort, f.tlsConfig = port, cfg
	// Pod to pod, never through a proxy.
	f.transport = &http.Transport{
		TLSClientConfig:     cfg.Clone(),
		DialContext:         (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		TLSHandshakeTimeout: 10 * time.Second,
		IdleConnTimeout:     90 * time.Second,
		MaxIdleConnsPerHost: 16,
		ForceAttemptHTTP2:   true,
	}
}

// SetLeading records whether this replica leads.
func (f *Forwarder) SetLeading(v bool) {
	f.mu.Lock()
	f.leading = v
	f.mu.Unlock()
}

// SetLeader records the current leader's identity.
func (f *Forwarder) SetLeader(id string) {
	f.mu.Lock()
	if id != f.leader {
		f.leader, f.target = id, nil
	}
	f.mu.Unlock()
}

// forward reports whether the request was handled by forwarding it to the leader.
func (f *Forwarder) forward(w http.ResponseWriter, r *http.Request) bool {
	f.mu.Lock()
	leading, leader := f.leading, f.leader
	f.mu.Unlock()
	if leading || leader == f.self {
		return false
	}
	if leader == "" {
		// Mid-election: the CLI's http backend retries, by then a leader exists.
		w.Header().Set("Retry-After", "2")
		http.Error(w, "no agent replica leads yet; retry", http.StatusServiceUnavailable)
		return true
	}
	target, err := f.resolve(r.Context(), leader)
	if err != nil {
		w.Header().Set("Retry-After", "2")
		http.Error(w, "cannot reach the leading agent replica; retry", http.StatusServiceUnavailable)
		return true
	}
	proxy := &httputil.ReverseProxy{
		Transport: f.transportFor(target),
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(target)
			pr.Out.Header.Set("X-Outpost-Forwarded-By", f.self)
		},
		ErrorHandler: func(w http.ResponseWriter, _ *http.Request, _ error) {
			f.forget(leader) // the pod may have a new IP; look it up again next time
			w.Header().Set("Retry-After", "2")
			http.Error(w, "the leading agent replica did not answer; retry", http.StatusBadGateway)
		},
	}
	proxy.ServeHTTP(w, r)
	return true
}

// resolve finds the leader pod's address; the result is kept until the leader changes.
func (f *Forwarder) resolve(ctx context.Context, leader string) (*url.URL, error) {
	f.mu.Lock()
	if f.target != nil && f.leader == leader {
		t := f.target
		f.mu.Unlock()
		return t, nil
	}
	f.mu.Unlock()
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	pod, err := f.kube.CoreV1().Pods(f.namespace).Get(ctx, leader, metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("find leader pod %s/%s: %w", f.namespace, leader, err)
	}
	if pod.Status.PodIP == "" {
		return nil, fmt.Errorf("leader pod %s/%s has no IP yet", f.namespace, leader)
	}
	t := &url.URL{Scheme: "http", Host: net.JoinHostPort(pod.Status.PodIP, f.port)}
	if f.tlsConfig != nil && servesTLS(pod) {
		t = &url.URL{Scheme: "https", Host: net.JoinHostPort(pod.Status.PodIP, f.tlsPort)}
	}
	f.mu.Lock()
	if f.leader == leader {
		f.target = t
	}
	f.mu.Unlock()
	return t, nil
}

// forget drops the cached address of leader.
func (f *Forwarder) forget(leader string) {
	f.mu.Lock()
	if f.leader == leader {
		f.target = nil
	}
	f.mu.Unlock()
}

// transportFor is the transport to target: the TLS one for https, the default otherwise.
func (f *Forwarder) transportFor(target *url.URL) http.RoundTripper {
	if target.Scheme == "https" && f.transport != nil {
		return f.transport
	}
	return nil // httputil.ReverseProxy's default
}

// servesTLS reports whether the pod's containers declare the TLS state port.
func servesTLS(pod *corev1.Pod) bool {
	for _, c := range pod.Spec.Containers {
		for _, p := range c.Ports {
			if p.Name == TLSPortName {
				return true
			}
		}
	}
	return false
}
