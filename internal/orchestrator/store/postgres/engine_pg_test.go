package postgres_test

import (
	"bytes"
	"errors"
	"log/slog"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/outpost-dev/terraform-provider-outpost/internal/orchestrator/store/postgres"
	"github.com/outpost-dev/terraform-provider-outpost/internal/orchestrator/store/storetest"
)

func TestMain(m *testing.M) { storetest.Main(m) }

// TestPostgreSQLReplicasStartTogether opens three engines on an empty database at once: the
// migrations run once (under the advisory lock) and every replica gets the same server secret,
// so a job token minted by one is taken by the others.
func TestPostgreSQLReplicasStartTogether(t *testing.T) {
	t.Parallel()
	pgURL := storetest.PostgreSQL(t)
	log := slog.New(slog.DiscardHandler)
	replicas := make([]*postgres.Engine, 3)
	errs := make([]error, 3)
	var wg sync.WaitGroup
	for i := range replicas {
		wg.Go(func() { replicas[i], errs[i] = postgres.Open(t.Context(), pgURL, false, log) })
	}
	wg.Wait()
	for i, e := range replicas {
		if errs[i] != nil {
			t.Fatalf("replica %d: %v", i, errs[i])
		}
		defer e.Close()
		if len(e.Secret()) != 32 || !bytes.Equal(e.Secret(), replicas[0].Secret()) {
			t.Fatalf("replica %d has another server secret", i)
		}
	}
	// One row per migration: each ran once, though three replicas started together.
	files, err := filepath.Glob("migrations/*.sql")
	if err != nil || len(files) == 0 {
		t.Fatalf("no migrations found: %v", err)
	}
	var versions int
	if err := replicas[0].Pool.QueryRow(t.Context(), "SELECT count(*) FROM schema_migrations").Scan(&versions); err != nil || versions != len(files) {
		t.Fatalf("schema_migrations has %d rows (%v), want %d", versions, err, len(files))
	}
}

// TestPostgreSQLNewerSchemaIsRefused: a database migrated by a newer orchestrator is not opened,
// and the error says what to do.
func TestPostgreSQLNewerSchemaIsRefused(t *testing.T) {
	t.Parallel()
	pgURL := storetest.PostgreSQL(t)
	log := slog.New(slog.DiscardHandler)
	e, err := postgres.Open(t.Context(), pgURL, false, log)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.Pool.Exec(t.Context(), "INSERT INTO schema_migrations (version) VALUES (99)"); err != nil {
		t.Fatal(err)
	}
	_ = e.Close()
	_, err = postgres.Open(t.Context(), pgURL, false, log)
	if err == nil || !strings.Contains(err.Error(), "newer orchestrator (schema 99") {
		t.Fatalf("open a database of schema 99: %v", err)
	}
}

// TestPostgreSQLURLIsNotEchoed: a malformed database URL is refused without repeating it, since
// it can hold a password.
func TestPostgreSQLURLIsNotEchoed(t *testing.T) {
	t.Parallel()
	_, err := postgres.Open(t.Context(), "postgres://u:s3cret-pw@host:notaport/db", false, slog.New(slog.DiscardHandler))
	if err == nil || strings.Contains(err.Error(), "s3cret-pw") || !strings.Contains(err.Error(), "not a valid PostgreSQL connection string") {
		t.Fatalf("malformed URL: %v", err)
	}
}

// TestDatabaseURLNeedsVerifiedTLSOffLoopback (N6): a database URL that would reach PostgreSQL
// across the network without verified TLS (pgx's default sslmode=prefer falls back to plain
// text) is refused before anything is sent, with an error that says why and names the opt-in,
// and never repeats the password; on loopback, with verify-full or with the opt-in it passes.
func TestDatabaseURLNeedsVerifiedTLSOffLoopback(t *testing.T) {
	t.Parallel()
	const opt = "--database-insecure-tls"
	for _, c := range []struct {
		url      string
		insecure bool
		refused  bool
	}{
		{"postgres://u:s3cret-pw@db.invalid/outpost", false, true},
		{"postgres://u:s3cret-pw@db.invalid/outpost?sslmode=prefer", false, true},
		{"postgres://u:s3cret-pw@db.invalid/outpost?sslmode=allow", false, true},
		{"postgres://u:s3cret-pw@db.invalid/outpost?sslmode=disable", false, true},
		{"postgres://u:s3cret-pw@db.invalid/outpost?sslmode=require", false, true},
		{"postgres://u:s3cret-pw@db.invalid/outpost?sslmode=verify-ca", false, true},
		{"postgres://u:s3cret-pw@10.0.0.5:5432/outpost?sslmode=disable", false, true},
		{"host=db.invalid user=u password=s3cret-pw dbname=outpost sslmode=require", false, true},
		// The second host of a multi-host URL counts too.
		{"postgres://u:s3cret-pw@127.0.0.1:5432,db.invalid:5432/outpost?sslmode=disable", false, true},
		{"postgres://u:s3cret-pw@db.invalid/outpost?sslmode=verify-full", false, false},
		{"postgres://u:s3cret-pw@db.invalid/outpost?sslmode=disable", true, false},
		{"postgres://u:s3cret-pw@127.0.0.1:5432/outpost?sslmode=disable", false, false},
		{"postgres://u:s3cret-pw@localhost/outpost", false, false},
		{"postgres://u:s3cret-pw@[::1]:5432/outpost?sslmode=disable", false, false},
		{"host=/var/run/postgresql user=u dbname=outpost", false, false},
	} {
		cfg, err := pgconn.ParseConfig(c.url)
		if err != nil {
			t.Fatalf("%s: %v", c.url, err)
		}
		err = postgres.CheckDatabaseTLS(cfg, c.insecure, opt)
		if got := errors.Is(err, postgres.ErrDatabaseTLS); got != c.refused {
			t.Errorf("%s (opt-in %v): %v; refused %v, want %v", c.url, c.insecure, err, got, c.refused)
		}
		if err != nil && (strings.Contains(err.Error(), "s3cret-pw") || !strings.Contains(err.Error(), opt) || !strings.Contains(err.Error(), "verify-full")) {
			t.Errorf("%s: the error must name verify-full and %s and not the password: %v", c.url, opt, err)
		}
	}
	// Through the engine's opening: refused before any connection (db.invalid never resolves);
	// store/engines (the command's start and migrate-store) opens it this way too.
	start := time.Now()
	_, err := postgres.Open(t.Context(), "postgres://u:s3cret-pw@db.invalid/outpost", false, slog.New(slog.DiscardHandler))
	if !errors.Is(err, postgres.ErrDatabaseTLS) || strings.Contains(err.Error(), "s3cret-pw") {
		t.Fatalf("start with a database URL without TLS: %v", err)
	}
	t.Logf("refused in %v: %v", time.Since(start).Round(time.Millisecond), err)
}
