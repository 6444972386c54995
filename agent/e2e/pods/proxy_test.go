package pods

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"io"
	"log"
	"math/big"
	"net"
	"net/http"
	"net/http/cgi"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/outpost-dev/terraform-provider-outpost/internal/api"
	"github.com/outpost-dev/terraform-provider-outpost/internal/orchestrator/orchestratortest"
	"github.com/outpost-dev/terraform-provider-outpost/internal/testbed"
)

// Hosts of the test's module server. They resolve nowhere (.test is reserved): only the proxy
// knows where they are, so a request that bypassed the proxy would fail.
const (
	modulesHost   = "modules.outpost.test"
	gitHost       = "git.outpost.test"
	untrustedHost = "untrusted.outpost.test"
)

// TestProxyAndCAReachTheCLIAndGit installs the chart with a proxy and a CA bundle and runs a
// configuration whose modules come from an HTTPS archive and a git::https repository, served by
// the test with certificates of its own CA, at names only the proxy can reach. So the apply
// succeeds only if the CLI (module download) and git both used the proxy and verified TLS with
// the CA; a module from a server whose certificate another CA signed fails, so verification was
// on; and the orchestrator and the agent's state backend were reached directly (NO_PROXY).
func TestProxyAndCAReachTheCLIAndGit(t *testing.T) {
	t.Parallel()
	ca, caPEM := newCA(t, "Outpost test CA")
	other, _ := newCA(t, "some other CA")
	srv := newModuleServer(t, map[string]tls.Certificate{
		modulesHost:   ca.issue(t, modulesHost),
		gitHost:       ca.issue(t, gitHost),
		untrustedHost: other.issue(t, untrustedHost),
	})
	c := testbed.Shared(t)
	testbed.RequireNode(t, c)
	px := newProxy(t, net.JoinHostPort(c.HostIP, "0"), srv.addr, modulesHost, gitHost, untrustedHost)

	e := newEnv(t, envOptions{
		values: "proxy: {httpsProxy: \"" + px.url + "\", httpProxy: \"" + px.url + "\"}\ncaBundle: {existingSecret: corp-ca}\n",
		before: func(e *env) {
			// The chart's caBundle: the agent mounts it from its namespace, job pods from theirs.
			for _, ns := range []string{e.agentNS, e.jobsNS} {
				e.createSecret(ns, "corp-ca", map[string]string{"ca.crt": string(caPEM)})
			}
		},
	})
	config := map[string]string{"main.tf": `
module "from_https" {
  source = "https://` + modulesHost + `/module.tar.gz"
}

module "from_git" {
  source = "git::https://` + gitHost + `/repo.git?ref=main"
}

output "https" {
  value = module.from_https.message
}

output "git" {
  value = module.from_git.message
}
`}
	r, pod := e.deployWatchingPod(api.OperationApply, config, "proxied")
	if r.d.Status != api.StatusSucceeded {
		t.Fatalf("apply through the proxy: %s (%s)\n%s", r.d.Status, r.d.Message, r.log)
	}
	outs := e.outputs(r.d.ID)
	if outs["https"] != `"from the https archive"` || outs["git"] != `"from the git repository"` {
		t.Errorf("outputs %v", outs)
	}
	if !strings.Contains(r.log, "==> trusting the extra CA certificates") {
		t.Errorf("the job runner did not hand the CA bundle to the CLI and git:\n%s", r.log)
	}
	checkProxyEnv(t, pod, px.url)

	// Requests went through the proxy, to the names the configuration uses, and arrived over TLS
	// with the right certificate; nothing else used the proxy (NO_PROXY kept the orchestrator on
	// HostIP and the state backend's Service direct).
	for _, want := range []string{modulesHost + ":443", gitHost + ":443"} {
		if !slices.Contains(px.seen(), want) {
			t.Errorf("the proxy saw %v, not %s", px.seen(), want)
		}
	}
	for _, req := range px.seen() {
		if !strings.HasSuffix(req, ".outpost.test:443") {
			t.Errorf("went through the proxy although NO_PROXY covers it, or is not the module server: %s", req)
		}
	}
	for _, want := range []string{modulesHost + " GET /module.tar.gz", gitHost + " GET /repo.git/info/refs"} {
		if !slices.ContainsFunc(srv.seen(), func(s string) bool { return strings.HasPrefix(s, want) }) {
			t.Errorf("the module server saw %v, not %q", srv.seen(), want)
		}
	}

	// A certificate the CA bundle does not vouch for is refused: TLS verification is on.
	bad := e.deploy(api.OperationApply, map[string]string{"main.tf": `
module "untrusted" {
  source = "https://` + untrustedHost + `/module.tar.gz"
}
`}, "untrusted")
	if bad.d.Status != api.StatusFailed || !strings.Contains(bad.log, "certificate signed by unknown authority") {
		t.Errorf("a module from a server of another CA: %s\n%s", bad.d.Status, bad.log)
	}
	if !slices.Contains(px.seen(), untrustedHost+":443") || slices.ContainsFunc(srv.seen(), func(s string) bool { return strings.HasPrefix(s, untrustedHost) }) {
		t.Errorf("want the untrusted server reached through the proxy but no request completed: proxy %v, server %v", px.seen(), srv.seen())
	}
	e.noLeftovers()
}

// checkProxyEnv checks the proxy variables of the job pod's main container: the chart's proxy and
// its NO_PROXY with the cluster-internal defaults, in both cases.
func checkProxyEnv(t *testing.T, pod *corev1.Pod, proxyURL string) {
	t.Helper()
	if pod == nil {
		t.Fatal("never saw the job pod")
	}
	env := map[string]string{}
	for _, c := range pod.Spec.Containers {
		if c.Name == "main" {
			for _, v := range c.Env {
				env[v.Name] = v.Value
			}
		}
	}
	for _, name := range []string{"HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy"} {
		if env[name] != proxyURL {
			t.Errorf("main's %s = %q, want %q", name, env[name], proxyURL)
		}
	}
	for _, name := range []string{"NO_PROXY", "no_proxy"} {
		for _, want := range []string{".svc", ".cluster.local", "10.0.0.0/8"} {
			if !slices.Contains(strings.Split(env[name], ","), want) {
				t.Errorf("main's %s = %q lacks %s", name, env[name], want)
			}
		}
		if strings.Contains(env[name], "$(") {
			t.Errorf("main's %s = %q holds an unexpanded variable", name, env[name])
		}
	}
}

// proxy is an HTTP proxy that tunnels CONNECT to the module server's names only, and records
// every request.
type proxy struct {
	url    string
	routes map[string]string // host:port → address
	mu     sync.Mutex
	log    []string
}

func newProxy(t *testing.T, listen, target string, hosts ...string) *proxy {
	t.Helper()
	p := &proxy{routes: map[string]string{}}
	for _, h := range hosts {
		p.routes[h+":443"] = target
	}
	ln, err := (&net.ListenConfig{}).Listen(t.Context(), "tcp", listen)
	if err != nil {
		t.Fatal(err)
	}
	s := &http.Server{Handler: p, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = s.Serve(ln) }()
	t.Cleanup(func() { _ = s.Close() })
	p.url = "http://" + ln.Addr().String()
	return p
}

func (p *proxy) seen() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.log)
}

func (p *proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	p.mu.Lock()
	if r.Method == http.MethodConnect {
		p.log = append(p.log, r.Host)
	} else {
		p.log = append(p.log, r.Method+" "+r.URL.String())
	}
	p.mu.Unlock()
	target, ok := p.routes[r.Host]
	if r.Method != http.MethodConnect || !ok {
		http.Error(w, "this proxy only tunnels to the test's module server", http.StatusForbidden)
		return
	}
	upstream, err := (&net.Dialer{Timeout: 5 * time.Second}).DialContext(r.Context(), "tcp", target)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	conn, buf, err := http.NewResponseController(w).Hijack()
	if err != nil {
		upstream.Close()
		return
	}
	_, _ = conn.Write([]byte("HTTP/1.1 200 Connection established\r\n\r\n"))
	go func() {
		_, _ = io.Copy(upstream, buf)
		_ = upstream.Close()
	}()
	go func() {
		_, _ = io.Copy(conn, upstream)
		_ = conn.Close()
	}()
}

// moduleServer serves a module archive and a git repository over HTTPS on loopback, where pods
// cannot reach it except through the proxy, choosing its certificate by the name the client asks
// for (SNI), and records every request as "<name> <method> <path>".
type moduleServer struct {
	addr string
	mu   sync.Mutex
	log  []string
}

func newModuleServer(t *testing.T, certs map[string]tls.Certificate) *moduleServer {
	t.Helper()
	m := &moduleServer{}
	archive := orchestratortest.TarGz(t, map[string]string{"main.tf": "output \"message\" {\n  value = \"from the https archive\"\n}\n"})
	mux := http.NewServeMux()
	mux.HandleFunc("GET /module.tar.gz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/gzip")
		_, _ = w.Write(archive)
	})
	gitBin, err := exec.LookPath("git")
	if err != nil {
		t.Fatalf("git is needed to serve the git module: %v", err)
	}
	root := gitRepository(t, gitBin, "output \"message\" {\n  value = \"from the git repository\"\n}\n")
	mux.Handle("/repo.git/", &cgi.Handler{Path: gitBin, Args: []string{"http-backend"},
		Env: []string{"GIT_PROJECT_ROOT=" + root, "GIT_HTTP_EXPORT_ALL=1", "GIT_CONFIG_NOSYSTEM=1", "HOME=" + root}})
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		m.mu.Lock()
		m.log = append(m.log, r.TLS.ServerName+" "+r.Method+" "+r.URL.RequestURI())
		m.mu.Unlock()
		mux.ServeHTTP(w, r)
	}))
	srv.TLS = &tls.Config{MinVersion: tls.VersionTLS12, GetCertificate: func(hello *tls.ClientHelloInfo) (*tls.Certificate, error) {
		c, ok := certs[hello.ServerName]
		if !ok {
			return nil, errors.New("no certificate for " + hello.ServerName)
		}
		return &c, nil
	}}
	// The refused handshakes of the untrusted host are expected; do not print them.
	srv.Config.ErrorLog = log.New(io.Discard, "", 0)
	srv.StartTLS()
	t.Cleanup(srv.Close)
	m.addr = srv.Listener.Addr().String()
	return m
}

func (m *moduleServer) seen() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Clone(m.log)
}

// gitRepository makes a bare repository repo.git, branch main, holding main.tf, and returns the
// directory that holds it.
func gitRepository(t *testing.T, gitBin, mainTF string) string {
	t.Helper()
	work, root := t.TempDir(), t.TempDir()
	if err := os.WriteFile(filepath.Join(work, "main.tf"), []byte(mainTF), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{
		{"-C", work, "init", "-q", "-b", "main"},
		{"-C", work, "add", "main.tf"},
		{"-C", work, "-c", "user.name=Outpost test", "-c", "user.email=test@outpost.test", "commit", "-q", "-m", "module"},
		{"clone", "-q", "--bare", work, filepath.Join(root, "repo.git")},
	} {
		cmd := exec.CommandContext(t.Context(), gitBin, args...)
		cmd.Env = append(os.Environ(), "GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL=/dev/null")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
	}
	return root
}

// testCA is a certificate authority of the test's.
type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
}

func newCA(t *testing.T, name string) (*testCA, []byte) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tpl, tpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return &testCA{cert: cert, key: key}, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}

// issue signs a server certificate for host.
func (ca *testCA) issue(t *testing.T, host string) tls.Certificate {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	serial, _ := rand.Int(rand.Reader, big.NewInt(1<<62))
	tpl := &x509.Certificate{SerialNumber: serial, Subject: pkix.Name{CommonName: host}, DNSNames: []string{host},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	var chain bytes.Buffer
	_ = pem.Encode(&chain, &pem.Block{Type: "CERTIFICATE", Bytes: der})
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	c, err := tls.X509KeyPair(chain.Bytes(), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}))
	if err != nil {
		t.Fatal(err)
	}
	return c
}
