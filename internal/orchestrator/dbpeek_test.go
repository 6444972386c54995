package orchestrator

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/outpost-dev/terraform-provider-outpost/internal/orchestrator/store"
	"github.com/outpost-dev/terraform-provider-outpost/internal/orchestrator/store/bolt"
	"github.com/outpost-dev/terraform-provider-outpost/internal/orchestrator/store/postgres"
	"go.etcd.io/bbolt"
)

// What tests read of the database itself, on either engine.

// deploymentTables are the PostgreSQL tables that hold a deployment's parts.
var deploymentTables = []string{"deployments", "sources", "outputs", "events", "logs"}

// pgRowsOf lists the tables holding a row of the deployment.
func pgRowsOf(h *harness, pg *postgres.Engine, org, id string) []string {
	h.t.Helper()
	var out []string
	for _, table := range deploymentTables {
		col := "deployment_id"
		if table == "deployments" || table == "sources" || table == "outputs" {
			col = "id"
		}
		var n int
		if err := pg.Pool.QueryRow(h.t.Context(), "SELECT count(*) FROM "+table+" WHERE org = $1 AND "+col+" = $2", org, id).Scan(&n); err != nil {
			h.t.Fatal(err)
		}
		for range n {
			out = append(out, table)
		}
	}
	return out
}

// pgRowCount counts the rows of deployments and their parts.
func pgRowCount(h *harness, pg *postgres.Engine) int {
	h.t.Helper()
	total := 0
	for _, table := range deploymentTables {
		var n int
		if err := pg.Pool.QueryRow(h.t.Context(), "SELECT count(*) FROM "+table).Scan(&n); err != nil {
			h.t.Fatal(err)
		}
		total += n
	}
	return total
}

// storedBytes is everything the database holds, as bytes to search: the bbolt file, or the text
// of every row of every table of the harness's PostgreSQL schema. It closes the harness.
func storedBytes(h *harness) []byte {
	h.t.Helper()
	pg, ok := h.eng.(*postgres.Engine)
	if !ok {
		h.close()
		db, err := os.ReadFile(filepath.Join(h.cfg.DataDir, bolt.DBFile))
		if err != nil {
			h.t.Fatal(err)
		}
		return db
	}
	ctx := h.t.Context()
	rows, err := pg.Pool.Query(ctx, "SELECT table_name FROM information_schema.tables WHERE table_schema = current_schema()")
	if err != nil {
		h.t.Fatal(err)
	}
	tables, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil || len(tables) == 0 {
		h.t.Fatalf("list tables: %v (%d)", err, len(tables))
	}
	var b strings.Builder
	for _, table := range tables {
		rows, err := pg.Pool.Query(ctx, "SELECT t::text FROM "+pgx.Identifier{table}.Sanitize()+" t")
		if err != nil {
			h.t.Fatal(err)
		}
		texts, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			h.t.Fatal(err)
		}
		b.WriteString(strings.Join(texts, "\n"))
	}
	h.close()
	return []byte(b.String())
}

// replayCount is the number of remembered agent token ids.
func replayCount(ctx context.Context, eng store.Engine) (int, error) {
	if pg, ok := eng.(*postgres.Engine); ok {
		var n int
		err := pg.Pool.QueryRow(ctx, "SELECT count(*) FROM replay").Scan(&n)
		return n, err
	}
	b, ok := eng.(*bolt.Engine)
	if !ok {
		return 0, errors.New("unknown engine")
	}
	n := 0
	err := b.DB.View(func(tx *bbolt.Tx) error {
		n = tx.Bucket(bolt.BucketReplay).Stats().KeyN
		return nil
	})
	return n, err
}
