// Package engines opens the storage engine a configuration names (bbolt in a data directory, or
// PostgreSQL) and copies a bbolt data directory into PostgreSQL: the one package that knows both
// engines, which depguard keeps from knowing each other.
package engines

import (
	"context"
	"github.com/outpost-dev/terraform-provider-outpost/internal/orchestrator/store"
	"github.com/outpost-dev/terraform-provider-outpost/internal/orchestrator/store/bolt"
	"github.com/outpost-dev/terraform-provider-outpost/internal/orchestrator/store/postgres"
	"log/slog"
)

// Options name the storage engine Open opens.
type Options struct {
	// DataDir holds orchestrator.db; it is created when missing. Unused with DatabaseURL.
	DataDir string
	// DatabaseURL, when set, keeps everything in PostgreSQL instead of DataDir (a libpq URL or
	// keyword/value string), so that several replicas can serve the same organisations.
	DatabaseURL string
	// InsecureTLS lets DatabaseURL reach a server off loopback without verified TLS (sslmode
	// other than verify-full); only when the operator asked for it by name.
	InsecureTLS bool
	// Logger receives the engine's warnings (PostgreSQL connection losses); nil discards them.
	Logger *slog.Logger
}

// Open opens the database o names: PostgreSQL when DatabaseURL is set, else bbolt in
// DataDir.
func Open(ctx context.Context, o Options) (store.Engine, error) {
	if o.DatabaseURL != "" {
		log := o.Logger
		if log == nil {
			log = slog.New(slog.DiscardHandler)
		}
		pg, err := postgres.Open(ctx, o.DatabaseURL, o.InsecureTLS, log)
		if err != nil {
			return nil, err
		}
		return pg, nil
	}
	b, err := bolt.Open(o.DataDir)
	if err != nil {
		return nil, err
	}
	return b, nil
}
