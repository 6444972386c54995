package main

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net/http"
	"os"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/outpost-dev/terraform-provider-outpost/agent/internal/config"
	"github.com/outpost-dev/terraform-provider-outpost/agent/internal/session"
)

// kubeClient connects to the cluster: in-cluster by default, or through --kubeconfig. The
// process executor without leader election needs no cluster unless it serves Kubernetes state,
// so it gets nil when no kubeconfig was given.
func kubeClient(cfg *config.Config) (kubernetes.Interface, error) {
	var rc *rest.Config
	var err error
	switch {
	case cfg.Kubeconfig != "":
		rc, err = clientcmd.BuildConfigFromFlags("", cfg.Kubeconfig)
	case cfg.Executor == config.ExecutorProcess && !cfg.LeaderElect:
		return nil, nil
	default:
		rc, err = rest.InClusterConfig()
	}
	if err != nil {
		return nil, fmt.Errorf("kubernetes client config (set --kubeconfig outside a cluster): %w", err)
	}
	rc.QPS, rc.Burst = float32(cfg.KubeQPS), cfg.KubeBurst
	rc.UserAgent = "outpost-agent/" + config.Version
	return kubernetes.NewForConfig(rc)
}

// orchestratorHTTPClient trusts the system CAs plus --ca-bundle-file (appended, never replacing
// the system pool), honours HTTPS_PROXY/NO_PROXY, and keeps connections alive across polls.
func orchestratorHTTPClient(cfg *config.Config) (*http.Client, func() time.Duration, error) {
	base, ok := http.DefaultTransport.(*http.Transport)
	if !ok {
		return nil, nil, fmt.Errorf("unexpected default HTTP transport %T", http.DefaultTransport)
	}
	tr := base.Clone()
	tr.Proxy = http.ProxyFromEnvironment
	tr.IdleConnTimeout = 90 * time.Second
	if cfg.CABundleFile != "" {
		pool, err := x509.SystemCertPool()
		if err != nil || pool == nil {
			pool = x509.NewCertPool()
		}
		pem, err := os.ReadFile(cfg.CABundleFile)
		if err != nil {
			return nil, nil, fmt.Errorf("--ca-bundle-file: %w", err)
		}
		if !pool.AppendCertsFromPEM(pem) {
			return nil, nil, fmt.Errorf("--ca-bundle-file %s holds no PEM certificate", cfg.CABundleFile)
		}
		tr.TLSClientConfig = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	}
	c, rec := session.NewHTTPClient(tr)
	return c, rec.Take, nil
}
