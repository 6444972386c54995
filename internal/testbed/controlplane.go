package testbed

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"time"
)

// etcd and the API server, which every test bed runs.

func (c *Cluster) startEtcd(ctx context.Context, binDir string, port, peerPort int, detach bool) error {
	clientURL := fmt.Sprintf("http://127.0.0.1:%d", port)
	peerURL := fmt.Sprintf("http://127.0.0.1:%d", peerPort)
	p, err := startProcess(c.Dir, "etcd", filepath.Join(binDir, "etcd"), []string{
		"--name=testbed",
		"--data-dir=" + c.path("etcd"),
		"--listen-client-urls=" + clientURL,
		"--advertise-client-urls=" + clientURL,
		"--listen-peer-urls=" + peerURL,
		"--initial-advertise-peer-urls=" + peerURL,
		"--initial-cluster=testbed=" + peerURL,
		// The data is thrown away with the test bed; fsync only makes every write slow.
		"--unsafe-no-fsync",
		"--log-level=warn",
	}, nil, detach)
	if err != nil {
		return err
	}
	if err := c.track(p); err != nil {
		return err
	}
	hc := &http.Client{Timeout: 2 * time.Second}
	return c.waitFor(ctx, p, etcdReadyTimeout, "to become healthy", func() bool {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, clientURL+"/health", nil)
		if err != nil {
			return false
		}
		resp, err := hc.Do(req)
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode == http.StatusOK && strings.Contains(string(b), `"true"`)
	})
}

func (c *Cluster) startAPIServer(ctx context.Context, binDir, bindIP string, etcdPort, port int, detach bool) error {
	args := []string{
		fmt.Sprintf("--etcd-servers=http://127.0.0.1:%d", etcdPort),
		"--bind-address=" + bindIP,
		"--advertise-address=" + bindIP,
		fmt.Sprintf("--secure-port=%d", port),
		"--cert-dir=" + c.path("apiserver-certs"),
		"--tls-cert-file=" + c.path("pki/apiserver.crt"),
		"--tls-private-key-file=" + c.path("pki/apiserver.key"),
		"--client-ca-file=" + c.path("pki/ca.crt"),
		"--token-auth-file=" + c.path("pki/tokens.csv"),
		"--authorization-mode=Node,RBAC",
		"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
		"--service-account-key-file=" + c.path("pki/sa.pub"),
		"--service-account-signing-key-file=" + c.path("pki/sa.key"),
		"--service-cluster-ip-range=" + serviceClusterIPRange,
		"--allow-privileged=true",
		"--profiling=false",
		// Load tests create hundreds of Jobs at once from several clients.
		"--max-requests-inflight=1000",
		"--max-mutating-requests-inflight=500",
		// For logs, exec and port-forward through the real node's kubelet, which authenticates
		// its callers by client certificate.
		"--kubelet-client-certificate=" + c.path("pki/admin.crt"),
		"--kubelet-client-key=" + c.path("pki/admin.key"),
		// The node's address, never its name: resolving the name would ask this machine's DNS
		// resolver, off this machine, about a name only the test bed knows.
		"--kubelet-preferred-address-types=InternalIP",
	}
	if !c.Node {
		// The kubernetes Service would point at 127.0.0.1, which Endpoints refuse; without a
		// real node nothing talks to the API server through the Service. With one, it points at
		// HostIP, which Pods reach.
		args = append(args, "--endpoint-reconciler-type=none")
	}
	if len(c.nodes) > 1 {
		args = append(args, lifecycleAPIServerArgs...)
	}
	p, err := startProcess(c.Dir, "kube-apiserver", filepath.Join(binDir, "kube-apiserver"), args, nil, detach)
	if err != nil {
		return err
	}
	if err := c.track(p); err != nil {
		return err
	}
	hc := &http.Client{Timeout: 2 * time.Second, Transport: c.httpTransport()}
	return c.waitFor(ctx, p, apiserverReadyTimeout, "to answer /readyz", func() bool {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, c.Host+"/readyz", nil)
		req.Header.Set("Authorization", "Bearer "+c.Token)
		resp, err := hc.Do(req)
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		_, _ = io.Copy(io.Discard, resp.Body)
		return resp.StatusCode == http.StatusOK
	})
}

func (c *Cluster) httpTransport() *http.Transport {
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(c.CAData)
	return &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}}
}

// waitFor polls ready every 100 ms until it returns true, failing early, with the log tail of the
// component, if any test bed process has exited or the timeout passes.
func (c *Cluster) waitFor(ctx context.Context, p *process, timeout time.Duration, what string, ready func() bool) error {
	deadline := time.Now().Add(timeout)
	for {
		if err := c.exitedErr(); err != nil {
			return err
		}
		if ready() {
			return nil
		}
		if time.Now().After(deadline) {
			return p.failure(fmt.Sprintf("did not start: waited %s for it %s", timeout, what))
		}
		select {
		case <-ctx.Done():
			if errors.Is(ctx.Err(), context.Canceled) {
				return fmt.Errorf("testbed: start-up interrupted while waiting for %s %s: %w", p.name, what, ctx.Err())
			}
			return p.failure(fmt.Sprintf("did not start before the context ended (%v) waiting for it %s", ctx.Err(), what))
		case <-time.After(100 * time.Millisecond):
		}
	}
}
