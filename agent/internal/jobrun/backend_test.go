package jobrun

import (
	"bytes"
	"encoding/json"
	"encoding/pem"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hclsyntax"
	"github.com/zclconf/go-cty/cty"

	"github.com/outpost-dev/terraform-provider-outpost/agent/internal/jobenv"
	"github.com/outpost-dev/terraform-provider-outpost/agent/internal/stateproxy"
	"github.com/outpost-dev/terraform-provider-outpost/internal/api"
	"github.com/outpost-dev/terraform-provider-outpost/internal/sourcearchive/archivetest"
)

// parseBackend parses a backend override file the way Terraform does (HCL native syntax) and
// returns the backend type and its attributes as plain Go values.
func parseBackend(t *testing.T, src string) (string, map[string]any) {
	t.Helper()
	f, diags := hclsyntax.ParseConfig([]byte(src), backendFileName, hcl.InitialPos)
	if diags.HasErrors() {
		t.Fatalf("backend file does not parse: %v\n%s", diags, src)
	}
	body, ok := f.Body.(*hclsyntax.Body)
	if !ok {
		t.Fatalf("not a native syntax body: %T", f.Body)
	}
	if len(body.Blocks) != 1 || body.Blocks[0].Type != "terraform" {
		t.Fatalf("want one terraform block:\n%s", src)
	}
	inner := body.Blocks[0].Body
	if len(inner.Blocks) != 1 || inner.Blocks[0].Type != "backend" || len(inner.Blocks[0].Labels) != 1 {
		t.Fatalf("want one backend block:\n%s", src)
	}
	be := inner.Blocks[0]
	out := map[string]any{}
	for name, attr := range be.Body.Attributes {
		v, diags := attr.Expr.Value(nil)
		if diags.HasErrors() {
			t.Fatalf("attribute %s: %v", name, diags)
		}
		switch v.Type() {
		case cty.String:
			out[name] = v.AsString()
		case cty.Bool:
			out[name] = v.True()
		case cty.Number:
			i, _ := v.AsBigFloat().Int64()
			out[name] = int(i)
		default:
			t.Fatalf("attribute %s has type %s", name, v.Type().FriendlyName())
		}
	}
	return be.Labels[0], out
}

func TestBackendConfigPerStorageType(t *testing.T) {
	cases := []struct {
		name     string
		storage  api.StateStorage
		stateKey string
		kind     string
		want     map[string]any
	}{
		{
			name:     "kubernetes",
			storage:  api.StateStorage{StateStorageInput: api.StateStorageInput{ID: "k", Type: api.StateStorageKubernetes, Kubernetes: &api.KubernetesStateSpec{Namespace: "outpost-state"}}},
			stateKey: "team-a/app.prod",
			kind:     "http",
			want: map[string]any{
				"address":        "http://outpost-agent.outpost-system.svc:8080/v1/states/team-a%2Fapp.prod",
				"lock_address":   "http://outpost-agent.outpost-system.svc:8080/v1/states/team-a%2Fapp.prod",
				"unlock_address": "http://outpost-agent.outpost-system.svc:8080/v1/states/team-a%2Fapp.prod",
				"lock_method":    "LOCK", "unlock_method": "UNLOCK", "update_method": "POST",
				"retry_max": 10, "retry_wait_min": 1, "retry_wait_max": 30,
			},
		},
		{
			name:     "s3 with prefix",
			storage:  api.StateStorage{StateStorageInput: api.StateStorageInput{ID: "s", Type: api.StateStorageS3, S3: &api.S3StateSpec{Bucket: "tf-states", Region: "eu-west-1", PathPrefix: "/outpost/"}}},
			stateKey: "app/prod",
			kind:     "s3",
			want:     map[string]any{"bucket": "tf-states", "region": "eu-west-1", "key": "outpost/app/prod/terraform.tfstate", "use_lockfile": true},
		},
		{
			name:     "s3 without prefix",
			storage:  api.StateStorage{StateStorageInput: api.StateStorageInput{ID: "s", Type: api.StateStorageS3, S3: &api.S3StateSpec{Bucket: "tf-states", Region: "us-east-1"}}},
			stateKey: "app",
			kind:     "s3",
			want:     map[string]any{"bucket": "tf-states", "region": "us-east-1", "key": "app/terraform.tfstate", "use_lockfile": true},
		},
		{
			name:     "gcs",
			storage:  api.StateStorage{StateStorageInput: api.StateStorageInput{ID: "g", Type: api.StateStorageGCS, GCS: &api.GCSStateSpec{Bucket: "tf-states", PathPrefix: "outpost"}}},
			stateKey: "app/prod",
			kind:     "gcs",
			want:     map[string]any{"bucket": "tf-states", "prefix": "outpost/app/prod"},
		},
		{
			name:     "azurerm",
			storage:  api.StateStorage{StateStorageInput: api.StateStorageInput{ID: "a", Type: api.StateStorageAzureRM, AzureRM: &api.AzureRMStateSpec{StorageAccountName: "acct", ContainerName: "tfstate", ResourceGroupName: "rg", PathPrefix: "outpost"}}},
			stateKey: "app",
			kind:     "azurerm",
			want:     map[string]any{"storage_account_name": "acct", "container_name": "tfstate", "resource_group_name": "rg", "key": "outpost/app/terraform.tfstate", "use_azuread_auth": true},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			src, err := backendConfig(tc.storage, tc.stateKey, "http://outpost-agent.outpost-system.svc:8080/")
			if err != nil {
				t.Fatal(err)
			}
			kind, attrs := parseBackend(t, src)
			if kind != tc.kind || !reflect.DeepEqual(attrs, tc.want) {
				t.Fatalf("backend %q %v\nwant %q %v\nfile:\n%s", kind, attrs, tc.kind, tc.want, src)
			}
			for _, secret := range []string{"password", "username", "token"} {
				if strings.Contains(src, secret) {
					t.Errorf("backend file mentions %q; credentials must come from the environment", secret)
				}
			}
		})
	}
}

func TestBackendConfigErrors(t *testing.T) {
	for name, tc := range map[string]struct {
		st   api.StateStorage
		url  string
		want string
	}{
		"kubernetes without state URL": {api.StateStorage{StateStorageInput: api.StateStorageInput{ID: "k", Type: api.StateStorageKubernetes}}, "", "OUTPOST_STATE_URL"},
		"s3 without bucket":            {api.StateStorage{StateStorageInput: api.StateStorageInput{ID: "s", Type: api.StateStorageS3}}, "", "no s3 bucket"},
		"unknown type":                 {api.StateStorage{StateStorageInput: api.StateStorageInput{ID: "x", Type: "consul"}}, "", "unknown type"},
	} {
		if _, err := backendConfig(tc.st, "k", tc.url); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err = %v, want %q", name, err, tc.want)
		}
	}
}

func TestBackendEnvCarriesCredentials(t *testing.T) {
	k := api.StateStorage{StateStorageInput: api.StateStorageInput{Type: api.StateStorageKubernetes}}
	got := backendEnv(k, "dep-1", "opst_secret")
	want := []string{"TF_HTTP_USERNAME=dep-1", "TF_HTTP_PASSWORD=opst_secret"}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("env = %v, want %v", got, want)
	}
	if got := backendEnv(api.StateStorage{StateStorageInput: api.StateStorageInput{Type: api.StateStorageS3}}, "dep-1", "opj_secret"); got != nil {
		t.Fatalf("s3 must not get the job token: %v", got)
	}
}

// TestStateProxyTrustsTheStateCA: the state proxy the job runner puts in front of an https
// state URL trusts the state CA it is given, and only it (the CLI's trust before the proxy):
// a state backend whose certificate another CA issued is refused, and the job log says so.
func TestStateProxyTrustsTheStateCA(t *testing.T) {
	state, _ := newMemStateBackend(t)
	state.allow("dep-1", "opst_secret-credential")
	srv := httptest.NewTLSServer(state)
	defer srv.Close()
	statePEM := string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw}))
	for name, tc := range map[string]struct {
		caPEM string
		want  int
	}{
		"state CA": {statePEM, http.StatusNoContent},
		"other CA": {string(testCAPEM(t, "other")), stateproxy.StatusCertificateError},
	} {
		var log bytes.Buffer
		p, err := startStateProxy(t.Context(), srv.URL, tc.caPEM, &log, nil)
		if err != nil {
			t.Fatal(err)
		}
		req, _ := http.NewRequestWithContext(t.Context(), http.MethodGet, p.URL()+"/v1/states/app", nil)
		req.SetBasicAuth("dep-1", "opst_secret-credential")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		p.Close()
		if resp.StatusCode != tc.want {
			t.Errorf("%s: %d, want %d; log:\n%s", name, resp.StatusCode, tc.want, log.String())
		}
		if tc.want != http.StatusNoContent && !strings.Contains(log.String(), "not trusted") {
			t.Errorf("%s: the log does not say why:\n%s", name, log.String())
		}
	}
	if _, err := startStateProxy(t.Context(), srv.URL, "not a PEM", io.Discard, nil); err == nil || !strings.Contains(err.Error(), jobenv.StateCA) {
		t.Errorf("a CA without a certificate: %v", err)
	}
}

func TestHCLStringEscapes(t *testing.T) {
	for _, s := range []string{`plain`, `q"uote`, `back\slash`, "new\nline", "${not_interp}", "%{if x}", "$$", "tab\tand\x01ctl", "ünïcode"} {
		src := "x = " + hclString(s) + "\n"
		f, diags := hclsyntax.ParseConfig([]byte(src), "t.tf", hcl.InitialPos)
		if diags.HasErrors() {
			t.Fatalf("%q: %v", s, diags)
		}
		body, ok := f.Body.(*hclsyntax.Body)
		if !ok {
			t.Fatalf("not a native syntax body: %T", f.Body)
		}
		v, diags := body.Attributes["x"].Expr.Value(nil)
		if diags.HasErrors() || v.AsString() != s {
			t.Errorf("hclString(%q) reads back as %#v (%v)", s, v, diags)
		}
	}
}

func TestWriteConfigFilesReplacesPlantedLinks(t *testing.T) {
	dir, outside := archivetest.Sandbox(t)
	victim := filepath.Join(outside, "victim")
	if err := os.WriteFile(victim, []byte("keep"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{backendFileName, variablesFileName} {
		if err := os.Symlink(victim, filepath.Join(dir, n)); err != nil {
			t.Fatal(err)
		}
	}
	vars := map[string]json.RawMessage{"name": json.RawMessage(`"x"`), "n": json.RawMessage(`3`)}
	if err := writeConfigFiles(dir, "terraform {}\n", vars); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(victim); string(b) != "keep" {
		t.Fatalf("wrote through a planted symlink: %q", b)
	}
	var got map[string]any
	b, err := os.ReadFile(filepath.Join(dir, variablesFileName))
	if err != nil || json.Unmarshal(b, &got) != nil || got["name"] != "x" || got["n"] != float64(3) {
		t.Fatalf("variables file = %s (%v)", b, err)
	}
	if fi, _ := os.Stat(filepath.Join(dir, variablesFileName)); fi.Mode().Perm() != 0o600 {
		t.Fatalf("variables file mode %v, want 0600", fi.Mode().Perm())
	}
}

// TestStateCredentialIsRequiredWithAStateURL: with the agent's state backend to use, the job
// runner needs the attempt's state credential (it never offers the job token there) and stops
// before any request when the file is missing, naming it.
func TestStateCredentialIsRequiredWithAStateURL(t *testing.T) {
	dir := t.TempDir()
	tokenFile := filepath.Join(dir, "token")
	if err := os.WriteFile(tokenFile, []byte("opj_secret.mac"), 0o600); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{jobenv.APIURL: "http://127.0.0.1:1", jobenv.TokenFile: tokenFile, jobenv.StateURL: "http://127.0.0.1:2",
		jobenv.StateTokenFile: filepath.Join(dir, "state-token")}
	var stdout, stderr bytes.Buffer
	code := run(t.Context(), nil, func(k string) string { return env[k] }, nil, &stdout, &stderr)
	if code != ExitRunnerError || !strings.Contains(stderr.String(), "state credential") || !strings.Contains(stderr.String(), jobenv.StateTokenFile) {
		t.Fatalf("exit %d, stderr %q; want 2 naming the state credential's file", code, stderr.String())
	}
	cfg, err := loadConfig(nil, func(k string) string { return env[k] }, &stderr)
	if err != nil {
		t.Fatal(err)
	}
	cfg.StateURL = ""
	if st, err := readStateToken(cfg); err != nil || st != "" {
		t.Fatalf("without a state URL no state credential is read: %q, %v", st, err)
	}
}
