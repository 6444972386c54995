package main

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/spf13/pflag"

	"github.com/outpost-dev/terraform-provider-outpost/internal/flagenv"
	"github.com/outpost-dev/terraform-provider-outpost/internal/orchestrator/store/engines"
)

const migrateUsage = `Usage: outpost-orchestrator migrate-store --from DATA_DIR --to DATABASE_URL

Copies everything of a bbolt data directory (runners, state storages and the states their
agents reported, organisation tokens, deployments with their sources, outputs, logs and events,
the agent token ids already seen and the server secret) into an empty PostgreSQL database, in one transaction. Stop the orchestrator
that uses the data directory first. Then start the replicas with --database-url and the same
--admin-token as before; the data directory is left as it was.

Flags:
`

// runMigrateStore runs `outpost-orchestrator migrate-store`.
func runMigrateStore(ctx context.Context, args []string, getenv func(string) string, stderr io.Writer) error {
	fs := pflag.NewFlagSet("outpost-orchestrator migrate-store", pflag.ContinueOnError)
	fs.SetOutput(stderr)
	// --from and --to read the variables of the serve flags they stand for (--data-dir and
	// --database-url), so the same environment serves both commands.
	from := fs.String("from", getenv(envName("data-dir")), "the bbolt data directory to copy (env "+envName("data-dir")+")")
	to := fs.String("to", "", "the PostgreSQL connection URL to copy into (env "+envName("database-url")+"); prefer the environment variable, the URL can hold a password")
	insecureTLS := fs.Bool("database-insecure-tls", false, "let --to reach PostgreSQL off loopback without verified TLS (sslmode other than verify-full)")
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), migrateUsage)
		fs.PrintDefaults()
	}
	if err := flagenv.Parse(fs, args, envPrefix, getenv, "from", "to"); err != nil {
		return fmt.Errorf("migrate-store: %w", err)
	}
	if *to == "" {
		// Not the flag's default: --help would print the URL, password and all.
		*to = getenv(envName("database-url"))
	}
	switch {
	case fs.NArg() > 0:
		return fmt.Errorf("migrate-store: unexpected argument %q; see --help", fs.Arg(0))
	case *from == "" || *to == "":
		return errors.New("migrate-store: set both --from (the data directory) and --to (the PostgreSQL URL); see --help")
	}
	fmt.Fprintf(stderr, "copying %s into PostgreSQL...\n", *from)
	n, err := engines.CopyStore(ctx, *from, *to, *insecureTLS, stderr)
	if err != nil {
		return fmt.Errorf("migrate-store: %w; nothing was written to PostgreSQL", err)
	}
	fmt.Fprintf(stderr, "done: %d organisations, %d runners, %d state storages (%d reported states, %d drift marks), %d schedules, %d organisation tokens, %d deployments (%d log chunks, %d events, %d saved plans) are in PostgreSQL\n",
		n.Orgs, n.Runners, n.StateStorages, n.States, n.Drifts, n.Schedules, n.OrgTokens, n.Deployments, n.LogChunks, n.Events, n.Plans)
	return nil
}
