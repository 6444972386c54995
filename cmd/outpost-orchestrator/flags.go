package main

import (
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/pflag"

	"github.com/outpost-dev/terraform-provider-outpost/internal/flagenv"
	"github.com/outpost-dev/terraform-provider-outpost/internal/orchestrator"
	"github.com/outpost-dev/terraform-provider-outpost/internal/orchestrator/store"
)

// envPrefix starts the environment variable of every flag: --log-cap reads
// OUTPOST_ORCHESTRATOR_LOG_CAP. A flag given on the command line wins over its variable
// (package flagenv, which the agent parses its flags with too).
const envPrefix = "OUTPOST_ORCHESTRATOR_"

func envName(flagName string) string {
	return flagenv.Name(envPrefix, flagName)
}

// options are the settings of `outpost-orchestrator` (serve).
type options struct {
	listen, dataDir, databaseURL, adminToken, externalURL, logFormat, logCap string
	maxLogBytes                                                              string
	databaseInsecureTLS                                                      bool
	quotas                                                                   store.Quotas
	tlsCertFile, tlsKeyFile, signingSecretFile                               string
	leaseDuration                                                            time.Duration
	limits                                                                   orchestrator.HTTPLimits
	retention                                                                store.Retention
	printVersion                                                             bool

	// traceEndpoint is the OTLP/HTTP collector traces go to (tracing.Resolve); empty leaves it to
	// the standard OTEL_* variables, and tracing is off when they say nothing either.
	traceEndpoint string
}

const serveUsage = `Usage: outpost-orchestrator [flags]
       outpost-orchestrator token create|list|revoke ...   (see: outpost-orchestrator token --help)

Runs the reference Outpost orchestrator: the admin, agent and job API over a bbolt database in
--data-dir (one server), or over PostgreSQL with --database-url, where any number of replicas
serve the same organisations behind a load balancer. Give every replica the same --admin-token
and --external-url.

Copy a bbolt data directory into an empty PostgreSQL database with
       outpost-orchestrator migrate-store --from DIR --to DATABASE_URL

Tokens. The admin token (--admin-token) is the bootstrap token: a superuser that reaches every
organisation and alone creates, lists and revokes organisation tokens. Give teams organisation
tokens (outpost-orchestrator token create --org ORG --name NAME), which reach their own
organisation only. Without --admin-token, one is generated on first start into
<data-dir>/admin-token (mode 0600); its path, never its value, is logged.

TLS. With --tls-cert-file and --tls-key-file (PEM; the certificate file may hold the chain) the
server speaks HTTPS only, TLS 1.2 or later. The files are watched: a renewed pair is served within
seconds without a restart; a new pair that does not load keeps the old one in service and is
logged. Without them it speaks plain HTTP; put a TLS-terminating proxy in front, since agents and
the provider refuse a plain http:// URL that is not loopback.

Job tokens are signed with a secret kept apart from the database, in <data-dir>/signing-secret
(mode 0600, generated on first start) or --signing-secret-file.

Every flag also reads an environment variable (shown with each flag); the command line wins.
Pass the admin token through the environment rather than argv, so ps does not show it.

Flags:
`

// parseFlags reads the serve flags, then the environment for the flags not given.
func parseFlags(args []string, getenv func(string) string, out io.Writer) (*options, error) {
	o := &options{}
	fs := pflag.NewFlagSet("outpost-orchestrator", pflag.ContinueOnError)
	fs.SetOutput(out)
	fs.StringVar(&o.listen, "listen", "127.0.0.1:8700", "address to listen on")
	fs.StringVar(&o.dataDir, "data-dir", "./orchestrator-data", "directory of the database")
	fs.StringVar(&o.databaseURL, "database-url", "", "PostgreSQL connection URL (postgres://user:password@host:5432/db?sslmode=verify-full) instead of --data-dir, for several replicas; prefer the environment variable, the URL can hold a password")
	fs.BoolVar(&o.databaseInsecureTLS, "database-insecure-tls", false, "let --database-url reach PostgreSQL off loopback without verified TLS (sslmode other than verify-full): only on a network you trust, the password and every stored record cross it")
	fs.StringVar(&o.adminToken, "admin-token", "", "the bootstrap admin token: every organisation, and organisation tokens; prefer the environment variable; empty = generate one into <data-dir>/admin-token")
	fs.StringVar(&o.externalURL, "external-url", "", "base URL agents use to reach this server, e.g. https://outpost.example.com; empty = taken from each request's Host")
	fs.StringVar(&o.tlsCertFile, "tls-cert-file", "", "PEM certificate (and chain) to serve HTTPS with; reloaded when it changes; needs --tls-key-file")
	fs.StringVar(&o.tlsKeyFile, "tls-key-file", "", "PEM private key of --tls-cert-file; reloaded when it changes")
	fs.StringVar(&o.signingSecretFile, "signing-secret-file", "", "file of the secret that signs job tokens (hex, at least 32 bytes; e.g. a mounted Secret); empty = <data-dir>/signing-secret, generated on first start")
	fs.StringVar(&o.logFormat, "log-format", "text", "log format: json or text")
	fs.StringVar(&o.logCap, "log-cap", "16MiB", "most log bytes kept per deployment, e.g. 16MiB, 512KiB or 1048576")
	fs.DurationVar(&o.leaseDuration, "lease-duration", orchestrator.DefaultLeaseDuration, "how long a claim or a poll's renewal keeps a job lease")
	fs.IntVar(&o.limits.MaxConnections, "max-connections", orchestrator.DefaultMaxConnections, "most connections open at once (every agent holds one for its long poll); more wait to be accepted")
	fs.IntVar(&o.quotas.Runners, "max-runners-per-org", store.DefaultMaxRunners, "most runners of one organisation; more are refused with 403 quota_exceeded")
	fs.IntVar(&o.quotas.StateStorages, "max-state-storages-per-org", store.DefaultMaxStateStorages, "most state storages of one organisation")
	fs.IntVar(&o.quotas.Schedules, "max-schedules-per-org", store.DefaultMaxSchedules, "most schedules of drift checks of one organisation")
	fs.IntVar(&o.quotas.QueuedDeployments, "max-queued-deployments-per-org", store.DefaultMaxQueuedDeployments, "most deployments of one organisation waiting in its runners' queues")
	fs.StringVar(&o.maxLogBytes, "max-log-bytes-per-org", "10GiB", "most log bytes one organisation's deployments keep until they are purged; beyond it new deployments are refused, e.g. 10GiB")
	fs.DurationVar(&o.limits.ReadHeaderTimeout, "read-header-timeout", orchestrator.DefaultReadHeaderTimeout, "time a request's headers may take to arrive")
	fs.DurationVar(&o.limits.ReadTimeout, "read-timeout", orchestrator.DefaultReadTimeout, "time a whole request may take to arrive, body included (only requests with valid credentials get their body read)")
	fs.DurationVar(&o.limits.WriteTimeout, "write-timeout", orchestrator.DefaultWriteTimeout, "time from a request's headers to the end of its answer; above the 30s a long poll is held")
	fs.DurationVar(&o.limits.IdleTimeout, "idle-timeout", orchestrator.DefaultIdleTimeout, "time a kept-alive connection may sit idle between requests")
	retention := func(name string, d *time.Duration, def time.Duration, usage string) {
		*d = def
		fs.Var(retentionValue{d}, name, usage+", counted from the deployment's end; e.g. 1h or 30d, or forever")
	}
	retention("source-retention", &o.retention.Sources, store.DefaultSourceRetention, "how long an ended deployment's source and variables are kept (they can hold secrets)")
	retention("log-retention", &o.retention.Logs, store.DefaultLogRetention, "how long an ended deployment's log and events are kept")
	retention("deployment-retention", &o.retention.Deployments, store.DefaultDeploymentRetention, "how long an ended deployment itself, with its outputs, is kept")
	fs.StringVar(&o.traceEndpoint, "trace-endpoint", "", "OpenTelemetry collector to send each deployment's trace to, as an OTLP/HTTP base URL (e.g. http://otel-collector:4318); empty = the standard OTEL_EXPORTER_OTLP_ENDPOINT / OTEL_TRACES_EXPORTER variables, and no tracing when they are unset")
	fs.BoolVar(&o.printVersion, "version", false, "print the version and exit")
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), serveUsage)
		fs.PrintDefaults()
	}
	if err := flagenv.Parse(fs, args, envPrefix, getenv, "version"); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected argument %q; see --help", fs.Arg(0))
	}
	if (o.tlsCertFile == "") != (o.tlsKeyFile == "") {
		return nil, errors.New("--tls-cert-file and --tls-key-file go together: give both to serve HTTPS, or neither for plain HTTP")
	}
	if o.databaseURL != "" && o.adminToken == "" {
		return nil, errors.New("with --database-url, set --admin-token (or OUTPOST_ORCHESTRATOR_ADMIN_TOKEN) to the same long random value on every replica")
	}
	if err := o.limits.Validate(); err != nil {
		return nil, fmt.Errorf("--write-timeout: %w", err)
	}
	return o, nil
}

// retentionValue is a retention flag: a positive duration with an optional day unit (30d), or
// forever.
type retentionValue struct{ d *time.Duration }

func (v retentionValue) String() string {
	switch {
	case v.d == nil:
		return ""
	case *v.d < 0:
		return "forever"
	case *v.d > 0 && *v.d%(24*time.Hour) == 0:
		return strconv.FormatInt(int64(*v.d/(24*time.Hour)), 10) + "d"
	}
	return v.d.String()
}

// Type names the value in --help.
func (retentionValue) Type() string { return "duration" }

func (v retentionValue) Set(s string) error {
	s = strings.TrimSpace(s)
	if s == "forever" {
		*v.d = store.KeepForever
		return nil
	}
	var d time.Duration
	if days, ok := strings.CutSuffix(s, "d"); ok {
		n, err := strconv.Atoi(days)
		if err != nil {
			return fmt.Errorf("%q is not a number of days like 30d", s)
		}
		d = time.Duration(n) * 24 * time.Hour
	} else {
		var err error
		if d, err = time.ParseDuration(s); err != nil {
			return fmt.Errorf("%q is not a duration like 1h or 30d, or forever", s)
		}
	}
	if d <= 0 {
		return fmt.Errorf("%q must be positive; use forever to keep everything", s)
	}
	*v.d = d
	return nil
}

// parseSize reads a byte count with an optional KiB/MiB/GiB suffix.
func parseSize(s string) (int64, error) {
	units := []struct {
		suffix string
		mult   int64
	}{{"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}, {"B", 1}}
	num, mult := strings.TrimSpace(s), int64(1)
	for _, u := range units {
		if strings.HasSuffix(num, u.suffix) {
			num, mult = strings.TrimSpace(strings.TrimSuffix(num, u.suffix)), u.mult
			break
		}
	}
	n, err := strconv.ParseInt(num, 10, 64)
	if err != nil || n <= 0 {
		return 0, fmt.Errorf("--log-cap %q is not a positive size like 16MiB, 512KiB or 1048576", s)
	}
	return n * mult, nil
}
