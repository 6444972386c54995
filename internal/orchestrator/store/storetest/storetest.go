// Package storetest runs the tests of the orchestrator's rules on every storage engine: a fresh
// bbolt database and a fresh schema of a throwaway PostgreSQL server (internal/pgtest), started
// once per test binary on first use. Without PostgreSQL's binaries the PostgreSQL half is skipped,
// except under CI=true, where it fails; -short skips it too.
package storetest

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/outpost-dev/terraform-provider-outpost/internal/orchestrator/store"
	"github.com/outpost-dev/terraform-provider-outpost/internal/orchestrator/store/bolt"
	"github.com/outpost-dev/terraform-provider-outpost/internal/orchestrator/store/postgres"
	"github.com/outpost-dev/terraform-provider-outpost/internal/pgtest"
)

var (
	pgOnce sync.Once
	pgSrv  *pgtest.Server
	pgErr  error
)

// Main is the TestMain of a package that uses PostgreSQL or Each: it runs the tests and stops
// the PostgreSQL server they started.
func Main(m *testing.M) {
	code := m.Run()
	if pgSrv != nil {
		pgSrv.Stop()
	}
	os.Exit(code)
}

// PostgreSQL returns the URL of a fresh schema of the package's PostgreSQL server, starting the
// server on first use (Main stops it); without one the test is skipped (failed under CI=true).
func PostgreSQL(t testing.TB) string {
	t.Helper()
	if testing.Short() {
		t.Skip("-short starts no PostgreSQL server")
	}
	pgOnce.Do(func() { pgSrv, pgErr = pgtest.Start(context.Background()) })
	if pgErr != nil {
		if os.Getenv("CI") == "true" || !errors.Is(pgErr, pgtest.ErrMissing) {
			t.Fatalf("start PostgreSQL: %v", pgErr)
		}
		t.Skipf("needs PostgreSQL: %v", pgErr)
	}
	u, err := pgSrv.Schema(t.Context())
	if err != nil {
		t.Fatalf("create a schema for the test: %v", err)
	}
	return u + "&pool_max_conns=4"
}

// Each runs fn as the subtests "bbolt" and "postgresql", each on a fresh engine that is closed
// when it ends.
func Each(t *testing.T, fn func(t *testing.T, eng store.Engine)) {
	t.Helper()
	t.Run("bbolt", func(t *testing.T) {
		eng, err := bolt.Open(t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		run(t, eng, fn)
	})
	t.Run("postgresql", func(t *testing.T) {
		eng, err := postgres.Open(t.Context(), PostgreSQL(t), false, slog.New(slog.DiscardHandler))
		if err != nil {
			t.Fatal(err)
		}
		run(t, eng, fn)
	})
}

func run(t *testing.T, eng store.Engine, fn func(t *testing.T, eng store.Engine)) {
	t.Cleanup(func() {
		if err := eng.Close(); err != nil {
			t.Errorf("close the engine: %v", err)
		}
	})
	fn(t, eng)
}

// Clock is a clock the test moves: the Now of a store (store.Options) or a server.
type Clock struct {
	mu sync.Mutex
	t  time.Time
}

// NewClock starts at the current second, in UTC.
func NewClock() *Clock { return &Clock{t: time.Now().UTC().Truncate(time.Second)} }

// Now is the clock's time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

// Advance moves the clock on by d.
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}
