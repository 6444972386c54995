package jobrun

import (
	"context"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/outpost-dev/terraform-provider-outpost/agent/internal/jobenv"
	"github.com/outpost-dev/terraform-provider-outpost/agent/internal/stateproxy"
	"github.com/outpost-dev/terraform-provider-outpost/internal/api"
)

// Files the job runner writes into the configuration directory. Terraform and OpenTofu merge
// files ending in _override.tf last, and a backend block in an override file replaces the one
// (or the cloud block) of the configuration, so users need not declare any backend at all.
const (
	backendFileName   = "outpost_backend_override.tf"
	variablesFileName = "outpost.auto.tfvars.json"
)

// httpBackendRetryMax is how often the CLI retries a state request. The agent's state backend
// moves with the agent's leader; with waits of 1 s doubling to 30 s, ten retries ride out roughly
// three minutes of failover before the CLI gives up. The CLI retries what the state proxy answers
// 502 (a write it did not send again itself, a read it gave up on after 60 s).
const httpBackendRetryMax = 10

// stateObjectKey is where a state lives in an object store (s3 and azurerm):
// "<path_prefix>/<state_key>/terraform.tfstate", or "<state_key>/terraform.tfstate" without a
// prefix. A folder per state key leaves room for other files of the same state later.
func stateObjectKey(prefix, stateKey string) string {
	return joinKey(prefix, stateKey, "terraform.tfstate")
}

// joinKey joins object key parts with single slashes, ignoring empty parts.
func joinKey(parts ...string) string {
	var out []string
	for _, p := range parts {
		if p = strings.Trim(p, "/"); p != "" {
			out = append(out, p)
		}
	}
	return strings.Join(out, "/")
}

// stateURL is the address of a state in the agent's http backend: the state key is one path
// segment, so "team/app" becomes "team%2Fapp".
func stateURL(base, stateKey string) string {
	return strings.TrimRight(base, "/") + "/v1/states/" + url.PathEscape(stateKey)
}

// backendConfig renders the backend override file for the spec's state storage.
//
//   - kubernetes: the agent's http backend at <stateBaseURL>/v1/states/<key> (the state proxy's
//     URL, which forwards to $OUTPOST_STATE_URL), locked with
//     LOCK/UNLOCK. The credentials (deployment id and state credential) are not in the file; they travel
//     in TF_HTTP_USERNAME / TF_HTTP_PASSWORD (see backendEnv), so the credential never lands on
//     disk in the work dir nor in a plan file.
//   - s3: bucket and region from the storage, key from stateObjectKey, locking with an S3 lock
//     file (use_lockfile, Terraform/OpenTofu 1.10 or later). Credentials are ambient (IRSA,
//     EKS Pod Identity, AWS_* variables in the pod template).
//   - gcs: bucket, prefix "<path_prefix>/<state_key>"; the backend stores default.tfstate under
//     it and locks natively. Credentials are ambient (Workload Identity).
//   - azurerm: storage account and container, key from stateObjectKey, Entra ID auth for the
//     blob (use_azuread_auth) so no account key is needed; the identity comes from ARM_* variables
//     (Azure Workload Identity sets them via the pod template).
func backendConfig(st api.StateStorage, stateKey, stateBaseURL string) (string, error) {
	var attrs map[string]any
	var kind string
	switch st.Type {
	case api.StateStorageKubernetes:
		if stateBaseURL == "" {
			return "", fmt.Errorf("state storage %q is of type kubernetes but %s is not set; the agent sets it to the URL of its state backend", st.ID, jobenv.StateURL)
		}
		addr := stateURL(stateBaseURL, stateKey)
		kind = "http"
		attrs = map[string]any{
			"address": addr, "lock_address": addr, "unlock_address": addr,
			"lock_method": "LOCK", "unlock_method": "UNLOCK", "update_method": "POST",
			"retry_max": httpBackendRetryMax, "retry_wait_min": 1, "retry_wait_max": 30,
		}
	case api.StateStorageS3:
		if st.S3 == nil || st.S3.Bucket == "" {
			return "", fmt.Errorf("state storage %q is of type s3 but has no s3 bucket", st.ID)
		}
		kind = "s3"
		attrs = map[string]any{"bucket": st.S3.Bucket, "key": stateObjectKey(st.S3.PathPrefix, stateKey), "use_lockfile": true}
		if st.S3.Region != "" {
			attrs["region"] = st.S3.Region
		}
	case api.StateStorageGCS:
		if st.GCS == nil || st.GCS.Bucket == "" {
			return "", fmt.Errorf("state storage %q is of type gcs but has no gcs bucket", st.ID)
		}
		kind = "gcs"
		attrs = map[string]any{"bucket": st.GCS.Bucket, "prefix": joinKey(st.GCS.PathPrefix, stateKey)}
	case api.StateStorageAzureRM:
		az := st.AzureRM
		if az == nil || az.StorageAccountName == "" || az.ContainerName == "" {
			return "", fmt.Errorf("state storage %q is of type azurerm but lacks storage_account_name or container_name", st.ID)
		}
		kind = "azurerm"
		attrs = map[string]any{
			"storage_account_name": az.StorageAccountName, "container_name": az.ContainerName,
			"key": stateObjectKey(az.PathPrefix, stateKey), "use_azuread_auth": true,
		}
		if az.ResourceGroupName != "" {
			attrs["resource_group_name"] = az.ResourceGroupName
		}
	default:
		return "", fmt.Errorf("state storage %q has unknown type %q (want one of %s)", st.ID, st.Type, strings.Join(api.StateStorageTypes, ", "))
	}
	var b strings.Builder
	b.WriteString("# Written by the Outpost job runner; replaces any backend or cloud block of the configuration.\n")
	fmt.Fprintf(&b, "terraform {\n  backend %s {\n", hclString(kind))
	names := make([]string, 0, len(attrs))
	width := 0
	for k := range attrs {
		names = append(names, k)
		width = max(width, len(k))
	}
	sort.Strings(names)
	for _, k := range names {
		var v string
		switch x := attrs[k].(type) {
		case string:
			v = hclString(x)
		default:
			v = fmt.Sprint(x)
		}
		fmt.Fprintf(&b, "    %-*s = %s\n", width, k, v)
	}
	b.WriteString("  }\n}\n")
	return b.String(), nil
}

// backendEnv is the environment the CLI needs for the backend: for the agent's http backend
// the job runner's state credentials, which the agent checks against the claim (deployment id
// and the attempt's state credential, never the job token, and the state key of the placement).
// The CLI sends them to the state proxy on the pod's loopback, which passes them to the state
// backend and nowhere else (see startStateProxy).
func backendEnv(st api.StateStorage, deploymentID, stateToken string) []string {
	if st.Type != api.StateStorageKubernetes {
		return nil
	}
	return []string{"TF_HTTP_USERNAME=" + deploymentID, "TF_HTTP_PASSWORD=" + stateToken}
}

// startStateProxy starts the state proxy (package stateproxy) in front of the agent's state
// backend at stateURL; the CLI's http backend points at the proxy instead, so a state request
// on a connection to an agent pod that vanished (its node lost) fails over within the proxy's
// bounds rather than after the kernel's 15 minutes. For an https state URL the proxy trusts
// caPEM and only it when there is one (OUTPOST_STATE_CA, else OUTPOST_CA_BUNDLE_FILE's
// certificates), as the CLI did with TF_HTTP_CLIENT_CA_CERTIFICATE_PEM before the proxy, else
// the system's roots. Its retries and failures go to log, the job's log.
func startStateProxy(ctx context.Context, stateURL, caPEM string, log io.Writer, wrap func(http.Handler) http.Handler) (*stateproxy.Proxy, error) {
	opts := stateproxy.Options{Upstream: stateURL, Wrap: wrap}
	if caPEM != "" && strings.HasPrefix(strings.ToLower(stateURL), "https://") {
		opts.RootCAs = x509.NewCertPool()
		if !opts.RootCAs.AppendCertsFromPEM([]byte(caPEM)) {
			return nil, fmt.Errorf("the state backend's CA (%s, else %s) holds no PEM certificate", jobenv.StateCA, jobenv.CABundleFile)
		}
	}
	opts.Log = slog.New(slog.NewTextHandler(log, &slog.HandlerOptions{ReplaceAttr: func(groups []string, a slog.Attr) slog.Attr {
		if len(groups) == 0 && a.Key == slog.TimeKey {
			return slog.Attr{} // the log's lines carry no time of their own
		}
		return a
	}}))
	return stateproxy.Start(ctx, opts)
}

// hclString quotes s as an HCL string literal. Besides the usual escapes, "${" and "%{" are
// doubled, because HCL would otherwise read them as the start of a template sequence.
func hclString(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for i, r := range s {
		switch {
		case r == '"':
			b.WriteString(`\"`)
		case r == '\\':
			b.WriteString(`\\`)
		case r == '\n':
			b.WriteString(`\n`)
		case r == '\r':
			b.WriteString(`\r`)
		case r == '\t':
			b.WriteString(`\t`)
		case r < 0x20 || r == 0x7f:
			fmt.Fprintf(&b, `\u%04x`, r)
		case (r == '$' || r == '%') && i+1 < len(s) && s[i+1] == '{':
			b.WriteRune(r)
			b.WriteRune(r)
		default:
			b.WriteRune(r)
		}
	}
	b.WriteByte('"')
	return b.String()
}

// writeConfigFiles writes the backend override and, when the deployment has variables, the variables
// file into the configuration directory. An existing file of the same name (from the source)
// is replaced, never written through: it might be a symlink.
func writeConfigFiles(dir, backend string, vars map[string]json.RawMessage) error {
	if err := replaceFile(filepath.Join(dir, backendFileName), []byte(backend)); err != nil {
		return fmt.Errorf("write backend override: %w", err)
	}
	if len(vars) == 0 {
		return nil
	}
	data, err := json.MarshalIndent(vars, "", "  ")
	if err != nil {
		return fmt.Errorf("encode variables: %w", err)
	}
	if err := replaceFile(filepath.Join(dir, variablesFileName), append(data, '\n')); err != nil {
		return fmt.Errorf("write variables: %w", err)
	}
	return nil
}

// replaceFile writes data to a new file at p (mode 0600: variables may be sensitive).
func replaceFile(p string, data []byte) error {
	if err := os.Remove(p); err != nil && !os.IsNotExist(err) {
		return err
	}
	f, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// withoutAddresses is a backend file without the http backend's addresses, which then come from
// TF_HTTP_ADDRESS and its siblings (savedPlanEnv).
func withoutAddresses(backend string) string {
	var b strings.Builder
	for _, line := range strings.SplitAfter(backend, "\n") {
		switch strings.TrimSpace(strings.SplitN(line, "=", 2)[0]) {
		case "address", "lock_address", "unlock_address":
			continue
		}
		b.WriteString(line)
	}
	return b.String()
}
