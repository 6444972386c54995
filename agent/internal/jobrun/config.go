package jobrun

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"

	"github.com/outpost-dev/terraform-provider-outpost/agent/internal/jobenv"
	"github.com/outpost-dev/terraform-provider-outpost/internal/api"
	"github.com/outpost-dev/terraform-provider-outpost/internal/client"
)

// defaultTokenFile and defaultStateTokenFile are where the agent mounts the job token and the
// state credential in a Job's pod.
const (
	defaultTokenFile      = "/var/run/outpost/job/token"
	defaultStateTokenFile = "/var/run/outpost/job/state-token"
)

// terminationMessageFile is Kubernetes' default terminationMessagePath, which the agent sets on
// main. A variable so tests can point it elsewhere.
var terminationMessageFile = "/dev/termination-log"

// config is the job runner's configuration. Every setting is a flag of `outpost-agent job` that
// defaults to its environment variable (package jobenv), as for the agent itself; the agent's
// executors set the variables.
// The token itself is never taken from the environment or the command line (both are visible
// in /proc and in the pod spec), only from a file.
type config struct {
	APIURL    string // OUTPOST_API_URL, required
	TokenFile string // OUTPOST_JOB_TOKEN_FILE
	// StateTokenFile (OUTPOST_STATE_TOKEN_FILE) holds the state credential, read only when
	// StateURL is set.
	StateTokenFile string
	StateURL       string // OUTPOST_STATE_URL, required for kubernetes state storage
	// StateCA (OUTPOST_STATE_CA) is the PEM of the state backend's CA, the one the CLI trusts for
	// an https StateURL; empty: the CA bundle's.
	StateCA      string
	CLI          string // OUTPOST_CLI: terraform, tofu, an absolute path, or empty to detect
	WorkDir      string // OUTPOST_WORK_DIR; default $TMPDIR/outpost-job-<deployment id>
	CABundleFile string // OUTPOST_CA_BUNDLE_FILE: extra PEM CAs for the orchestrator
	// InsecureAllowHTTP (OUTPOST_INSECURE_ALLOW_HTTP) allows an http:// APIURL that is not
	// loopback; the agent sets it when it was allowed one itself.
	InsecureAllowHTTP bool

	Image string // OUTPOST_IMAGE: main's image, for messages

	PluginCacheDir       string // OUTPOST_PLUGIN_CACHE_DIR: TF_PLUGIN_CACHE_DIR of the CLI
	ProviderInstallation string // OUTPOST_PROVIDER_INSTALLATION: provider_installation block for the CLI

	// TerminationMessageFile is where a job runner error is left for Kubernetes (main's
	// terminationMessagePath, which the agent sets); written only when it exists.
	TerminationMessageFile string
}

func loadConfig(args []string, getenv func(string) string, stderr io.Writer) (config, error) {
	env := func(k, def string) string {
		if v := getenv(k); v != "" {
			return v
		}
		return def
	}
	c := config{TerminationMessageFile: terminationMessageFile}
	fs := flag.NewFlagSet("outpost-agent job", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(stderr, "Usage: outpost-agent job [flags]\n\nRuns one Outpost deployment: the entrypoint of a Job's main container.\n"+
			"Exit code: the CLI's; 2 = job runner error before the CLI ran; 3 = outputs could not be uploaded;\n"+
			"128+N = stopped by signal N.\n\nFlags (each defaults to its environment variable):\n")
		fs.PrintDefaults()
	}
	fs.StringVar(&c.APIURL, "api-url", env(jobenv.APIURL, ""), "orchestrator base URL ("+jobenv.APIURL+")")
	fs.StringVar(&c.TokenFile, "token-file", env(jobenv.TokenFile, defaultTokenFile), "file holding the job token ("+jobenv.TokenFile+")")
	fs.StringVar(&c.StateTokenFile, "state-token-file", env(jobenv.StateTokenFile, defaultStateTokenFile), "file holding the state credential, the password at --state-url ("+jobenv.StateTokenFile+")")
	fs.StringVar(&c.StateURL, "state-url", env(jobenv.StateURL, ""), "base URL of the agent's state backend ("+jobenv.StateURL+")")
	fs.StringVar(&c.CLI, "cli", env(jobenv.CLI, ""), "terraform, tofu or an absolute path; empty: the first of tofu and terraform on PATH ("+jobenv.CLI+")")
	c.Image = getenv(jobenv.Image)
	c.StateCA = getenv(jobenv.StateCA)
	fs.StringVar(&c.PluginCacheDir, "plugin-cache-dir", env(jobenv.PluginCacheDir, ""), "provider plugin cache shared by attempts, the CLI's TF_PLUGIN_CACHE_DIR ("+jobenv.PluginCacheDir+")")
	fs.StringVar(&c.ProviderInstallation, "provider-installation", env(jobenv.ProviderInstallation, ""), "provider_installation block of the CLI configuration, e.g. a network or filesystem mirror ("+jobenv.ProviderInstallation+")")
	fs.StringVar(&c.WorkDir, "work-dir", env(jobenv.WorkDir, ""), "work directory; default $TMPDIR/outpost-job-<deployment id> ("+jobenv.WorkDir+")")
	fs.StringVar(&c.CABundleFile, "ca-bundle-file", env(jobenv.CABundleFile, ""), "extra PEM CA certificates ("+jobenv.CABundleFile+")")
	insecure, err := strconv.ParseBool(env(jobenv.InsecureAllowHTTP, "false"))
	if err != nil {
		return c, fmt.Errorf("%s=%q is not true or false", jobenv.InsecureAllowHTTP, getenv(jobenv.InsecureAllowHTTP))
	}
	fs.BoolVar(&c.InsecureAllowHTTP, "insecure-allow-http", insecure, "allow an http:// --api-url that is not loopback; the job token then crosses the network unencrypted ("+jobenv.InsecureAllowHTTP+")")
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	if fs.NArg() > 0 {
		return c, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if c.APIURL == "" {
		return c, fmt.Errorf("%s is not set; the agent sets it to the orchestrator's URL", jobenv.APIURL)
	}
	if err := client.CheckPlainHTTP(c.APIURL, c.InsecureAllowHTTP, jobenv.InsecureAllowHTTP+"=true (the agent's --insecure-allow-http)"); err != nil {
		return c, fmt.Errorf("%s: %w", jobenv.APIURL, err)
	}
	if c.StateURL != "" && !strings.HasPrefix(c.StateURL, "http://") && !strings.HasPrefix(c.StateURL, "https://") {
		return c, fmt.Errorf("%s %q must start with http:// or https://", jobenv.StateURL, c.StateURL)
	}
	if err := checkPlainStateURL(c.StateURL, c.InsecureAllowHTTP); err != nil {
		return c, err
	}
	return c, nil
}

// readToken reads the job token file.
func readToken(path string) (string, error) {
	return readCredential(path, "job token", jobenv.TokenFile)
}

// readStateToken reads the state credential file; without a state URL there is none to read.
func readStateToken(c config) (string, error) {
	if c.StateURL == "" {
		return "", nil
	}
	return readCredential(c.StateTokenFile, "state credential", jobenv.StateTokenFile)
}

func readCredential(path, what, envName string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("read the %s (%s): %w", what, envName, err)
	}
	tok := strings.TrimSpace(string(b))
	if tok == "" {
		return "", fmt.Errorf("the %s file %s is empty", what, path)
	}
	return tok, nil
}

var deploymentIDPattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$`)

// validateSpec checks what the job runner relies on. The orchestrator validated the
// deployment already; this guards against a different orchestrator version or a bug, with an
// error that says what is wrong instead of a confusing CLI failure later.
func validateSpec(s *api.JobSpec) error {
	if !deploymentIDPattern.MatchString(s.DeploymentID) {
		return fmt.Errorf("deployment_id %q is not a valid deployment id", s.DeploymentID)
	}
	if !s.Operation.Valid() {
		return fmt.Errorf("operation %q is not one of plan, apply, destroy", s.Operation)
	}
	switch src := s.Source; {
	case (src.Inline == nil) == (src.Git == nil):
		return fmt.Errorf("source must have exactly one of inline or git")
	case src.Inline != nil && len(src.Inline.ArchiveTarGz) == 0:
		return fmt.Errorf("source.inline.archive_tar_gz is empty")
	case src.Git != nil && src.Git.URL == "":
		return fmt.Errorf("source.git.url is empty")
	case src.Git != nil && (filepath.IsAbs(src.Git.Path) || strings.HasPrefix(src.Git.Path, "/") || hasDotDot(src.Git.Path)):
		return fmt.Errorf("source.git.path %q must be a relative path without '..'", src.Git.Path)
	}
	if err := api.ValidateStateKey("state_key", s.StateKey); err != nil {
		return err
	}
	for name := range s.Variables {
		if !json.Valid(s.Variables[name]) {
			return fmt.Errorf("variables.%s is not valid JSON", name)
		}
	}
	return nil
}

func hasDotDot(p string) bool {
	for _, part := range strings.FieldsFunc(p, func(r rune) bool { return r == '/' || r == '\\' }) {
		if part == ".." {
			return true
		}
	}
	return false
}

// checkPlainStateURL refuses an http:// state URL whose host is not loopback: the state
// credential and the state itself (with every secret Terraform keeps in it) would cross the pod
// network in clear. The agent hands out https:// with its own CA; plain HTTP to another host
// needs the same opt-in as a plain orchestrator URL.
func checkPlainStateURL(stateURL string, allowInsecure bool) error {
	u, err := url.Parse(stateURL)
	if err != nil {
		return fmt.Errorf("%s %q: %w", jobenv.StateURL, stateURL, err)
	}
	if !strings.EqualFold(u.Scheme, "http") || allowInsecure {
		return nil
	}
	host := u.Hostname()
	if ip := net.ParseIP(host); strings.EqualFold(host, "localhost") || (ip != nil && ip.IsLoopback()) {
		return nil
	}
	return fmt.Errorf("%s %s is plain HTTP to another host: the state credential and the state would cross the network unencrypted, "+
		"readable by anyone on the way; the agent hands out https:// (chart value state.tls.enabled), or set %s=true (the agent's "+
		"--insecure-allow-http) if this network is trusted and you accept that", jobenv.StateURL, stateURL, jobenv.InsecureAllowHTTP)
}
