package jobrun

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
)

// trustBundleName is the merged CA bundle the job runner writes into its work directory.
const trustBundleName = "ca-bundle.pem"

// systemBundles are where images keep their trust store, in the order Go's crypto/x509 looks on
// Linux: Debian and Ubuntu (and Alpine's ca-certificates), Fedora and RHEL 6, openSUSE,
// OpenELEC, CentOS and RHEL 7, Alpine.
var systemBundles = []string{
	"/etc/ssl/certs/ca-certificates.crt",
	"/etc/pki/tls/certs/ca-bundle.crt",
	"/etc/ssl/ca-bundle.pem",
	"/etc/pki/tls/cacert.pem",
	"/etc/pki/ca-trust/extracted/pem/tls-ca-bundle.pem",
	"/etc/ssl/cert.pem",
}

// trustEnv makes the extra CA certificates (extraPEM, from OUTPOST_CA_BUNDLE_FILE) trusted by the
// CLI, its providers and git, not only by the job runner's own client. Each of those tools takes
// one bundle file that replaces its trust store rather than adding to it (Go's SSL_CERT_FILE,
// git's GIT_SSL_CAINFO), so the job runner writes the image's own trust store followed by the
// extra certificates into dir and points both variables there. The image's store is the file
// SSL_CERT_FILE names (set in the image or the pod template), else the first of systemBundles.
// It returns the variables and a sentence for the log.
func trustEnv(dir string, extraPEM []byte, getenv func(string) string) ([]string, string, error) {
	if len(extraPEM) == 0 {
		return nil, "", nil
	}
	candidates := systemBundles
	if f := getenv("SSL_CERT_FILE"); f != "" {
		candidates = append([]string{f}, candidates...)
	}
	var system []byte
	from := "no trust store found in the image"
	for _, f := range candidates {
		if b, err := os.ReadFile(f); err == nil && len(bytes.TrimSpace(b)) > 0 {
			system, from = b, "the image's trust store "+f
			break
		}
	}
	var merged bytes.Buffer
	merged.Write(system)
	if len(system) > 0 && system[len(system)-1] != '\n' {
		merged.WriteByte('\n')
	}
	merged.Write(extraPEM)
	p := filepath.Join(dir, trustBundleName)
	if err := replaceFile(p, merged.Bytes()); err != nil {
		return nil, "", fmt.Errorf("write the CA bundle for the CLI and git: %w", err)
	}
	note := fmt.Sprintf("trusting the extra CA certificates of %s on top of %s (SSL_CERT_FILE and GIT_SSL_CAINFO for the CLI and git)",
		"OUTPOST_CA_BUNDLE_FILE", from)
	return []string{"SSL_CERT_FILE=" + p, "GIT_SSL_CAINFO=" + p}, note, nil
}
