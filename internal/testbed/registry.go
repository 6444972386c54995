package testbed

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/crypto/bcrypt"
)

// The real node's OCI registry (Options.Node).
//
// Clusters pull their images from a registry, usually a private mirror behind credentials. So
// does the test bed's real node: distribution's registry (built from its Go module by
// scripts/testbed-build.sh) serves HTTPS on HostIP with a certificate from the test bed's CA and
// htpasswd basic auth, and keeps its blobs under <Dir>/registry. The node's containerd trusts the
// CA (a hosts.toml under its config_path, see containerd.toml) but holds no credentials: a Pod
// pulls only with an imagePullSecret that logs in, exactly as on a cluster whose nodes have no
// registry credentials of their own. Tests push images with go-containerregistry
// (tools/ocitest.RemoteOptions, outside the root module) or PushToolbox, and name them
// Registry.Host + "/…".
//
// Only the sandbox ("pause") and toolbox images stay imported with ctr at start-up: containerd
// pulls the sandbox image itself, without any Pod's pull secret, so it would need credentials in
// its own configuration, and then every Pod could pull without a secret of its own, which would
// make a missing or wrong pull secret pass unnoticed. The toolbox image is the pause image's one
// layer with another entrypoint; the node's probe Pod runs it before any namespace or Secret of a
// test exists.

// Registry is the test bed's OCI registry: where it listens and how to log in.
type Registry struct {
	// Host is the registry's address, HostIP:port: the first element of the images' names
	// ("10.247.0.1:40123/outpost-dev/outpost-agent:0.1.0"), and the key of its login in a Docker
	// config.
	Host string
	// Username and Password log in (basic auth; the registry checks them against a bcrypt
	// htpasswd file). Everything, pulls included, needs them.
	Username, Password string
	// CAData is the PEM of the CA that signed the registry's serving certificate: the test bed's
	// CA (Cluster.CAData).
	CAData []byte
}

// DockerConfigJSON returns the content of a kubernetes.io/dockerconfigjson Secret that logs in to
// the registry as username with password (Username and Password for a working one).
func (r *Registry) DockerConfigJSON(username, password string) []byte {
	auth := base64.StdEncoding.EncodeToString([]byte(username + ":" + password))
	b, err := json.Marshal(map[string]any{"auths": map[string]any{
		r.Host: map[string]string{"username": username, "password": password, "auth": auth},
	}})
	if err != nil {
		panic(err) // strings only
	}
	return b
}

// Transport returns an HTTP transport that trusts the registry's CA (and nothing else).
func (r *Registry) Transport() (*http.Transport, error) {
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(r.CAData) {
		return nil, errors.New("testbed: the registry's CA is not valid PEM")
	}
	// The registry is on this machine's own address: no proxy from the environment (Proxy nil).
	return &http.Transport{
		TLSClientConfig:     &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12},
		ForceAttemptHTTP2:   true,
		MaxIdleConnsPerHost: 8,
		IdleConnTimeout:     90 * time.Second,
		TLSHandshakeTimeout: 10 * time.Second,
	}, nil
}

// registryUser is the registry's one user.
const registryUser = "outpost-testbed"

// registryReadyTimeout bounds the registry's start; it serves within a second on an idle machine.
const registryReadyTimeout = 60 * time.Second

// startRegistry starts the registry on HostIP with a serving certificate from p's CA and a new
// random password, and records it in c.Registry. It does not wait: waitRegistryReady does.
func (c *Cluster) startRegistry(binDir string, p *pki, detach bool) (*process, error) {
	ports, err := freePorts(1)
	if err != nil {
		return nil, fmt.Errorf("testbed: %w", err)
	}
	host := net.JoinHostPort(c.HostIP, strconv.Itoa(ports[0]))
	crt, key, err := p.serving("outpost-testbed-registry", net.ParseIP(c.HostIP))
	if err != nil {
		return nil, fmt.Errorf("testbed: creating the registry's serving certificate: %w", err)
	}
	pw := make([]byte, 16)
	if _, err := rand.Read(pw); err != nil {
		return nil, err
	}
	r := &Registry{Host: host, Username: registryUser, Password: hex.EncodeToString(pw), CAData: p.caCert}
	// The lowest bcrypt cost: the registry checks the password on every request (basic auth has
	// no session), and at the default cost that is ~70 ms of CPU per blob a node pulls.
	hash, err := bcrypt.GenerateFromPassword([]byte(r.Password), bcrypt.MinCost)
	if err != nil {
		return nil, err
	}
	dir := c.path("registry")
	files := map[string][]byte{
		"tls.crt":    crt,
		"tls.key":    key,
		"htpasswd":   fmt.Appendf(nil, "%s:%s\n", r.Username, hash),
		"config.yml": []byte(registryConfig(host, dir)),
		"data/.keep": nil,
	}
	for name, data := range files {
		path := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
			return nil, fmt.Errorf("testbed: %w", err)
		}
		if err := os.WriteFile(path, data, 0o600); err != nil {
			return nil, fmt.Errorf("testbed: %w", err)
		}
	}
	c.Registry = r
	for _, n := range c.nodes {
		if err := n.files.writeRegistryHosts(host, c.path("pki/ca.crt")); err != nil {
			return nil, fmt.Errorf("testbed: telling containerd about the registry: %w", err)
		}
	}
	// OTEL_TRACES_EXPORTER=none: distribution exports traces over OTLP by default, to a collector
	// that does not exist here.
	proc, err := startProcess(c.Dir, "registry", filepath.Join(binDir, "registry"),
		[]string{"serve", filepath.Join(dir, "config.yml")}, []string{"OTEL_TRACES_EXPORTER=none"}, detach)
	if err != nil {
		return nil, err
	}
	return proc, c.track(proc)
}

// registryConfig is the registry's configuration: HTTPS on host, htpasswd auth, blobs on the
// filesystem under dir, one line of access log per request (the log shows who pulled what), no
// upload purging (the test bed lives for minutes).
func registryConfig(host, dir string) string {
	return fmt.Sprintf(`version: 0.1
log:
  level: info
  formatter: text
storage:
  filesystem:
    rootdirectory: %q
  delete:
    enabled: true
  maintenance:
    uploadpurging:
      enabled: false
http:
  addr: %q
  tls:
    certificate: %q
    key: %q
auth:
  htpasswd:
    realm: outpost-testbed
    path: %q
`, filepath.Join(dir, "data"), host, filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key"), filepath.Join(dir, "htpasswd"))
}

// waitRegistryReady waits until the registry answers /v2/ to its user over TLS verified with the
// test bed's CA.
func (c *Cluster) waitRegistryReady(ctx context.Context, p *process) error {
	t, err := c.Registry.Transport()
	if err != nil {
		return err
	}
	hc := &http.Client{Transport: t, Timeout: 2 * time.Second}
	defer t.CloseIdleConnections()
	return c.waitFor(ctx, p, registryReadyTimeout, "to serve /v2/", func() bool {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, "https://"+c.Registry.Host+"/v2/", nil)
		if err != nil {
			return false
		}
		req.SetBasicAuth(c.Registry.Username, c.Registry.Password)
		resp, err := hc.Do(req)
		if err != nil {
			return false
		}
		_ = resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
}

// registryHostsDir is containerd's config_path: one directory per registry host holding a
// hosts.toml (containerd 1.5 and later read it at every pull).
func (f nodeFiles) registryHostsDir() string { return f.path("certs.d") }

// writeRegistryHosts makes containerd trust caFile for the registry at host. Only TLS: no
// credentials, which the Pods' pull secrets bring.
func (f nodeFiles) writeRegistryHosts(host, caFile string) error {
	dir := filepath.Join(f.registryHostsDir(), host)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	toml := fmt.Sprintf(`server = %q

[host.%q]
  capabilities = ["pull", "resolve"]
  ca = %q
`, "https://"+host, "https://"+host, caFile)
	return os.WriteFile(filepath.Join(dir, "hosts.toml"), []byte(toml), 0o600)
}

// PushToolbox pushes the toolbox image (ToolboxImage's content: the testbed-pod program, entrypoint
// /testbed-pod) to the registry as Registry.Host/repo ("name:tag") and returns that reference,
// for tests whose Pods must pull an image that runs but does nothing else, with a pull secret.
func (c *Cluster) PushToolbox(ctx context.Context, repo string) (string, error) {
	if c.Registry == nil {
		return "", errors.New("testbed: PushToolbox: this test bed runs no registry (testbed.Options{Node: true})")
	}
	repoName, tag, ok := strings.Cut(repo, ":")
	if !ok || repoName == "" || tag == "" {
		return "", fmt.Errorf("testbed: PushToolbox: %q is not name:tag", repo)
	}
	binDir, err := findBinaries()
	if err != nil {
		return "", err
	}
	img, err := podImage(filepath.Join(binDir, podBinary), []string{"/" + podBinary})
	if err != nil {
		return "", fmt.Errorf("testbed: building the toolbox image: %w", err)
	}
	ref := c.Registry.Host + "/" + repo
	if err := c.Registry.push(ctx, repoName, tag, img); err != nil {
		return "", fmt.Errorf("testbed: pushing the toolbox image to %s: %w", ref, err)
	}
	return ref, nil
}

// push uploads img's blobs and then its manifest as repo:tag, through the registry API of the
// OCI distribution spec (a monolithic upload per blob: POST, then PUT with the digest), logged
// in as the registry's user.
func (r *Registry) push(ctx context.Context, repo, tag string, img *ociImage) error {
	t, err := r.Transport()
	if err != nil {
		return err
	}
	defer t.CloseIdleConnections()
	hc := &http.Client{Transport: t, Timeout: time.Minute}
	base := &url.URL{Scheme: "https", Host: r.Host}
	// do sends one request and returns the answer's headers, or an error unless its status is want.
	do := func(method string, u *url.URL, contentType string, body []byte, want int) (http.Header, error) {
		req, err := http.NewRequestWithContext(ctx, method, u.String(), bytes.NewReader(body))
		if err != nil {
			return nil, err
		}
		req.SetBasicAuth(r.Username, r.Password)
		if contentType != "" {
			req.Header.Set("Content-Type", contentType)
		}
		resp, err := hc.Do(req)
		if err != nil {
			return nil, err
		}
		defer resp.Body.Close()
		if resp.StatusCode != want {
			msg, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
			return nil, fmt.Errorf("%s %s: %s, want %d: %s", method, u.Path, resp.Status, want, strings.TrimSpace(string(msg)))
		}
		return resp.Header, nil
	}
	for _, blob := range img.blobs() {
		h, err := do(http.MethodPost, base.JoinPath("v2", repo, "blobs", "uploads", "/"), "", nil, http.StatusAccepted)
		if err != nil {
			return err
		}
		loc, err := base.Parse(h.Get("Location"))
		if err != nil {
			return fmt.Errorf("the upload's Location %q: %w", h.Get("Location"), err)
		}
		q := loc.Query()
		q.Set("digest", digestOf(blob))
		loc.RawQuery = q.Encode()
		if _, err := do(http.MethodPut, loc, "application/octet-stream", blob, http.StatusCreated); err != nil {
			return err
		}
	}
	_, err = do(http.MethodPut, base.JoinPath("v2", repo, "manifests", tag), ociManifestType, img.manifest, http.StatusCreated)
	return err
}
