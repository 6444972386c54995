package orchestrator

import (
	"bytes"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
)

// TestPostgreSQLReplicasStartTogether opens three engines on an empty database at once: the
// migrations run once (under the advisory lock) and every replica gets the same server secret,
// so a job token minted by one is taken by the others.
func TestPostgreSQLReplicasStartTogether(t *testing.T) {
	t.Parallel()
	pgURL := pgSchema(t)
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	engines := make([]*pgEngine, 3)
	errs := make([]error, 3)
	var wg sync.WaitGroup
	for i := range engines {
		wg.Go(func() { engines[i], errs[i] = openPG(t.Context(), pgURL, log) })
	}
	wg.Wait()
	for i, e := range engines {
		if errs[i] != nil {
			t.Fatalf("replica %d: %v", i, errs[i])
		}
		defer e.close()
		if len(e.secret()) != 32 || !bytes.Equal(e.secret(), engines[0].secret()) {
			t.Fatalf("replica %d has another server secret", i)
		}
	}
	var versions int
	if err := engines[0].pool.QueryRow(t.Context(), "SELECT count(*) FROM schema_migrations").Scan(&versions); err != nil || versions != 1 {
		t.Fatalf("schema_migrations has %d rows (%v), want 1", versions, err)
	}
}

// TestPostgreSQLNewerSchemaIsRefused: a database migrated by a newer orchestrator is not opened,
// and the error says what to do.
func TestPostgreSQLNewerSchemaIsRefused(t *testing.T) {
	t.Parallel()
	pgURL := pgSchema(t)
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	e, err := openPG(t.Context(), pgURL, log)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.pool.Exec(t.Context(), "INSERT INTO schema_migrations (version) VALUES (99)"); err != nil {
		t.Fatal(err)
	}
	_ = e.close()
	_, err = openPG(t.Context(), pgURL, log)
	if err == nil || !strings.Contains(err.Error(), "newer orchestrator (schema 99") {
		t.Fatalf("open a database of schema 99: %v", err)
	}
}

// TestPostgreSQLURLIsNotEchoed: a malformed database URL is refused without repeating it, since
// it can hold a password.
func TestPostgreSQLURLIsNotEchoed(t *testing.T) {
	t.Parallel()
	_, err := New(Config{DatabaseURL: "postgres://u:s3cret-pw@host:notaport/db", AdminToken: "admin-token-for-tests-0123456789", SweepInterval: -1})
	if err == nil || strings.Contains(err.Error(), "s3cret-pw") || !strings.Contains(err.Error(), "not a valid PostgreSQL connection string") {
		t.Fatalf("malformed URL: %v", err)
	}
}
