// Package jobenv is the environment contract between the agent's executors and the job runner: the
// variables an executor sets on the main container of an attempt's Job (kubernetes executor) or on
// its process (process executor), which `outpost-agent job` reads. Each is also a flag of
// `outpost-agent job`, so the job runner can be started by hand. The job token itself is never
// among them: the environment is visible in the pod spec and /proc, so only the path of the file
// holding it is.
package jobenv

const (
	// APIURL is the orchestrator's base URL, the one the agent itself talks to. Required.
	APIURL = "OUTPOST_API_URL"
	// TokenFile is the path of the file holding the attempt's job token: a Secret volume in a
	// Job's pod, a 0600 file in the attempt's folder for the process executor.
	TokenFile = "OUTPOST_JOB_TOKEN_FILE"
	// StateTokenFile is the path of the file holding the attempt's state credential, the job
	// runner's password at the state backend (the job token is refused there): the same Secret
	// volume or folder as the job token.
	StateTokenFile = "OUTPOST_STATE_TOKEN_FILE"
	// StateURL is the base URL of the agent's state backend. Set only for attempts whose state
	// storage is of type kubernetes; the job runner points the CLI's http backend at it.
	StateURL = "OUTPOST_STATE_URL"
	// StateCA is the PEM of the CA that issued the state backend's serving certificate (the
	// agent's own, kept in a Secret of its namespace). The job runner trusts it, and only it, for
	// an https state URL.
	StateCA = "OUTPOST_STATE_CA"
	// CLI is the CLI the job runner runs: terraform, tofu, or an absolute path to one of them.
	CLI = "OUTPOST_CLI"
	// WorkDir is the directory the job runner works in, owned by whoever set it (the process
	// executor cleans it up after the finished event). Unset, the job runner uses a temporary
	// directory of its own.
	WorkDir = "OUTPOST_WORK_DIR"
	// CABundleFile is a PEM bundle of extra CA certificates, trusted on top of the system's for
	// the orchestrator and handed on to the http backend for an https state URL.
	CABundleFile = "OUTPOST_CA_BUNDLE_FILE"
	// InsecureAllowHTTP is "true" when the agent was allowed a plain http:// orchestrator URL that
	// is not loopback (its --insecure-allow-http); the job runner refuses one otherwise.
	InsecureAllowHTTP = "OUTPOST_INSECURE_ALLOW_HTTP"

	// PluginCacheDir is a directory shared by the attempts (the cluster owner's plugin cache
	// volume): the job runner creates it and hands it to the CLI as TF_PLUGIN_CACHE_DIR, so a
	// provider downloaded once is linked, not downloaded, by the next init.
	PluginCacheDir = "OUTPOST_PLUGIN_CACHE_DIR"
	// ProviderInstallation is a provider_installation block of the CLI configuration (network
	// or filesystem mirrors, for clusters without registry access). The job runner writes it
	// to a CLI configuration file of the attempt and points TF_CLI_CONFIG_FILE at it.
	ProviderInstallation = "OUTPOST_PROVIDER_INSTALLATION"

	// Image is the image main runs in, for messages only (an image without terraform or tofu is
	// named in the error). Set by the kubernetes executor.
	Image = "OUTPOST_IMAGE"
)
