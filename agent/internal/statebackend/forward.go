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
	"github.com/outpost-dev/terraform-provider-outpost/agent/internal/stateproxy"
	"github.com/outpost-dev/terraform-provider-outpost/internal/connguard"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// forwardedByHeader names the replica that forwarded a request; a request carrying it is never
// forwarded again.
const forwardedByHeader = "X-Outpost-Forwarded-By"

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
	// plain reaches a leader in plain HTTP. Both transports dial with the state proxy's bounds
	// (stateproxy.Dialer) and drop connections idle for 5 s: a request forwarded to a leader
	// whose node was lost fails within 15 s, instead of waiting on the connection until the
	// job's state proxy gives up on the answer (up to 150 s for a write).
	plain *http.Transport

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
	return &Forwarder{kube: kube, namespace: namespace, port: port, self: self, plain: podTransport(nil)}
}

// podTransport is a transport to a leader pod: pod to pod, never through a proxy, with the state
// proxy's bounds on every connection (see Forwarder.plain).
func podTransport(cfg *tls.Config) *http.Transport {
	return &http.Transport{
		TLSClientConfig:     cfg,
		DialContext:         stateproxy.Dialer().DialContext,
		TLSHandshakeTimeout: 10 * time.Second,
		IdleConnTimeout:     stateproxy.DefaultIdleTimeout,
		MaxIdleConnsPerHost: 16,
		ForceAttemptHTTP2:   cfg != nil,
	}
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
	f.transport = podTransport(cfg.Clone())
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
	changed := id != f.leader
	if changed {
		f.leader, f.target = id, nil
	}
	f.mu.Unlock()
	if changed {
		// Kept-alive connections are to the previous leader, which may be gone without a reset.
		f.plain.CloseIdleConnections()
		if f.transport != nil {
			f.transport.CloseIdleConnections()
		}
	}
}

// forward reports whether the request was handled by forwarding it to the leader.
func (f *Forwarder) forward(w http.ResponseWriter, r *http.Request) bool {
	f.mu.Lock()
	leading, leader := f.leading, f.leader
	f.mu.Unlock()
	if leading || leader == f.self {
		return false
	}
	if by := r.Header.Get(forwardedByHeader); by != "" {
		// Forwarded once already, by a replica that took this one for the leader: the two views
		// of the election differ for a moment. Forwarding again could send the request back and
		// forth; the CLI retries, and by then the election has settled.
		w.Header().Set("Retry-After", "2")
		http.Error(w, "forwarded by "+by+" to a replica that does not lead; retry", http.StatusServiceUnavailable)
		return true
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
			pr.Out.Header.Set(forwardedByHeader, f.self)
		},
		ModifyResponse: func(resp *http.Response) error {
			// The leader checked the credential: the connection is the job's, as on the leader.
			if user, _, ok := r.BasicAuth(); ok && resp.StatusCode != http.StatusUnauthorized {
				connguard.Authenticated(r.Context(), "forwarded/"+user)
			}
			return nil
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

// transportFor is the transport to target: the TLS one for https, the plain one otherwise.
func (f *Forwarder) transportFor(target *url.URL) http.RoundTripper {
	if target.Scheme == "https" && f.transport != nil {
		return f.transport
	}
	return f.plain
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
