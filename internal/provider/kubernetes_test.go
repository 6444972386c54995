package provider

import (
	"os"
	"path/filepath"
	"testing"
)

const testKubeconfig = `apiVersion: v1
kind: Config
current-context: a
contexts:
- name: a
  context: {cluster: a, user: a, namespace: ns-a}
- name: b
  context: {cluster: b, user: b}
clusters:
- name: a
  cluster: {server: "https://a.example.com:6443", insecure-skip-tls-verify: true}
- name: b
  cluster: {server: "https://b.example.com:6443", insecure-skip-tls-verify: true}
users:
- name: a
  user: {token: token-a}
- name: b
  user: {token: token-b}
`

func TestKubeSettingsRESTConfig(t *testing.T) {
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(path, []byte(testKubeconfig), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Run("current context", func(t *testing.T) {
		cfg, err := kubeSettings{configPath: path}.restConfig()
		if err != nil {
			t.Fatal(err)
		}
		if cfg.Host != "https://a.example.com:6443" || cfg.BearerToken != "token-a" {
			t.Fatalf("host %s token %s", cfg.Host, cfg.BearerToken)
		}
	})
	t.Run("config_context", func(t *testing.T) {
		cfg, err := kubeSettings{configPath: path, configContext: "b"}.restConfig()
		if err != nil {
			t.Fatal(err)
		}
		if cfg.Host != "https://b.example.com:6443" || cfg.BearerToken != "token-b" {
			t.Fatalf("host %s token %s", cfg.Host, cfg.BearerToken)
		}
	})
	t.Run("attributes override the file", func(t *testing.T) {
		cfg, err := kubeSettings{configPath: path, host: "https://c.example.com", token: "token-c", insecure: true}.restConfig()
		if err != nil {
			t.Fatal(err)
		}
		if cfg.Host != "https://c.example.com" || cfg.BearerToken != "token-c" {
			t.Fatalf("host %s token %s", cfg.Host, cfg.BearerToken)
		}
	})
	t.Run("host without a file", func(t *testing.T) {
		cfg, err := kubeSettings{host: "https://d.example.com", token: "t", insecure: true}.restConfig()
		if err != nil {
			t.Fatal(err)
		}
		if cfg.Host != "https://d.example.com" {
			t.Fatalf("host %s", cfg.Host)
		}
	})
	t.Run("missing file", func(t *testing.T) {
		if _, err := (kubeSettings{configPath: filepath.Join(t.TempDir(), "nope")}).restConfig(); err == nil {
			t.Fatal("a missing kubeconfig was accepted")
		}
	})
	t.Run("nothing configured", func(t *testing.T) {
		t.Setenv("KUBERNETES_SERVICE_HOST", "")
		if _, err := (kubeSettings{}).restConfig(); err == nil {
			t.Fatal("an empty configuration was accepted")
		}
	})
}
