package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/pflag"

	"github.com/outpost-dev/terraform-provider-outpost/internal/api"
	"github.com/outpost-dev/terraform-provider-outpost/internal/client"
	"github.com/outpost-dev/terraform-provider-outpost/internal/flagenv"
	"github.com/outpost-dev/terraform-provider-outpost/internal/version"
)

// `outpost-orchestrator token` manages organisation tokens through the running orchestrator's
// admin API, authenticated with the bootstrap admin token. Going through the server (rather
// than the database, which the server holds under an exclusive lock) makes it safe while the
// server runs, and works from any machine that reaches it.

const tokenUsage = `Usage: outpost-orchestrator token create --org ORG --name NAME
       outpost-orchestrator token list   --org ORG
       outpost-orchestrator token revoke --org ORG TOKEN_ID

Manages the organisation tokens of a running orchestrator. An organisation token reaches its
own organisation only; on another organisation's objects it gets 404. create prints the token
on stdout, once: the orchestrator keeps only its SHA-256, so store it right away.

The command authenticates with the bootstrap admin token: OUTPOST_ORCHESTRATOR_ADMIN_TOKEN, or
else the file <data-dir>/admin-token the orchestrator generated.

Flags:
`

type tokenOptions struct {
	url, dataDir, org, name string
	insecureHTTP            bool
}

// runToken runs `outpost-orchestrator token <verb> …`.
func runToken(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	fs := pflag.NewFlagSet("outpost-orchestrator token", pflag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), tokenUsage)
		fs.PrintDefaults()
	}
	if len(args) == 0 || strings.HasPrefix(args[0], "-") {
		fs.Usage()
		if len(args) > 0 && (args[0] == "-h" || args[0] == "--help" || args[0] == "-help") {
			return pflag.ErrHelp
		}
		return errors.New("token: name what to do: create, list or revoke")
	}
	verb := args[0]
	o := tokenOptions{}
	fs.StringVar(&o.url, "url", defaultURL(getenv), "base URL of the running orchestrator")
	fs.StringVar(&o.dataDir, "data-dir", "./orchestrator-data", "the orchestrator's data directory, where the generated bootstrap admin token is kept")
	fs.StringVar(&o.org, "org", "", "the organisation (a DNS-1123 label)")
	fs.StringVar(&o.name, "name", "", "create: who or what holds the token, e.g. ci or terraform-prod")
	fs.BoolVar(&o.insecureHTTP, "insecure-allow-http", false, "allow an http:// --url that is not loopback: the bootstrap and new tokens then cross the network unencrypted")
	if err := flagenv.Parse(fs, args[1:], envPrefix, getenv, "org", "name"); err != nil {
		return err
	}
	admin, err := o.client(getenv)
	if err != nil {
		return err
	}
	switch verb {
	case "create":
		if fs.NArg() > 0 || o.name == "" {
			return errors.New("token create: give --name (who or what holds the token) and no other arguments")
		}
		tok, err := admin.CreateToken(ctx, o.name)
		if err != nil {
			return o.explain(err)
		}
		fmt.Fprintf(stderr, "created token %s (%s) of organisation %s; it is shown this once: store it now\n", tok.ID, tok.Name, o.org)
		fmt.Fprintln(stdout, tok.Token)
	case "list":
		if fs.NArg() > 0 {
			return fmt.Errorf("token list: unexpected argument %q", fs.Arg(0))
		}
		list, err := admin.ListTokens(ctx)
		if err != nil {
			return o.explain(err)
		}
		tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "ID\tNAME\tCREATED")
		for _, t := range list {
			fmt.Fprintf(tw, "%s\t%s\t%s\n", t.ID, t.Name, t.CreatedAt.Format(time.RFC3339))
		}
		return tw.Flush()
	case "revoke":
		if fs.NArg() != 1 {
			return errors.New("token revoke: give the id of one token (see token list), e.g. token revoke --org acme tok-abc")
		}
		if err := admin.RevokeToken(ctx, fs.Arg(0)); err != nil {
			return o.explain(err)
		}
		fmt.Fprintf(stderr, "revoked token %s of organisation %s\n", fs.Arg(0), o.org)
	default:
		return fmt.Errorf("token %s: unknown; use create, list or revoke", verb)
	}
	return nil
}

// defaultURL is the orchestrator this machine runs by its listen address.
func defaultURL(getenv func(string) string) string {
	listen := getenv(envName("listen"))
	if listen == "" {
		listen = "127.0.0.1:8700"
	}
	host, port, err := net.SplitHostPort(listen)
	if err != nil {
		return "http://127.0.0.1:8700"
	}
	if host == "" || host == "0.0.0.0" || host == "::" {
		host = "127.0.0.1"
	}
	return "http://" + net.JoinHostPort(host, port)
}

// client builds the admin client of the organisation with the bootstrap admin token.
func (o tokenOptions) client(getenv func(string) string) (*client.AdminClient, error) {
	if o.org == "" {
		return nil, errors.New("give the organisation with --org")
	}
	if err := client.CheckPlainHTTP(o.url, o.insecureHTTP, "--insecure-allow-http"); err != nil {
		return nil, fmt.Errorf("--url: %w", err)
	}
	tok := getenv(envName("admin-token"))
	if tok == "" {
		path := filepath.Join(o.dataDir, "admin-token")
		b, err := os.ReadFile(path)
		if err != nil {
			return nil, fmt.Errorf("no bootstrap admin token: set %s, or point --data-dir at the orchestrator's data directory (reading %s: %w)",
				envName("admin-token"), path, errors.Unwrap(err))
		}
		tok = strings.TrimSpace(string(b))
	}
	opts := []client.Option{client.WithUserAgent("outpost-orchestrator/" + version.Version), client.WithRetryPolicy(client.RetryPolicy{MaxTries: 2, BaseDelay: 200 * time.Millisecond, MaxDelay: time.Second})}
	if o.insecureHTTP {
		opts = append(opts, client.AllowInsecureHTTP())
	}
	admin, err := client.NewAdminClient(o.url, o.org, tok, opts...)
	if err != nil {
		return nil, fmt.Errorf("--org/--url: %w", err)
	}
	return admin, nil
}

// explain adds what to do to the errors a person meets.
func (o tokenOptions) explain(err error) error {
	switch {
	case errors.Is(err, api.ErrUnauthorized), errors.Is(err, api.ErrForbidden):
		return fmt.Errorf("%w; the token commands need the bootstrap admin token (%s or <data-dir>/admin-token), not an organisation token", err, envName("admin-token"))
	case errors.Is(err, api.ErrUnavailable):
		return fmt.Errorf("%w; is the orchestrator running at %s? (--url, %s)", err, o.url, envName("url"))
	}
	return err
}
