package orchestrator

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/outpost-dev/terraform-provider-outpost/internal/pgtest"
)

// testPG is the PostgreSQL server of the suite's second run; nil while it runs on bbolt.
// testPGErr says why there is no second run.
// testPGServer is that server in both runs, for the tests of PostgreSQL alone (replicas, the
// copy from bbolt).
var (
	testPG       *pgtest.Server
	testPGServer *pgtest.Server
	testPGErr    error
)

// TestMain runs every test of the package twice: on bbolt, then on a throwaway PostgreSQL
// server (one for the whole run, a schema per harness). -short leaves the second run out.
// Without PostgreSQL the second run is skipped, which TestPostgreSQLRun reports, except under
// CI=true, where it fails.
func TestMain(m *testing.M) {
	var srv *pgtest.Server
	switch {
	case isShort():
		testPGErr = errors.New("-short starts no PostgreSQL server")
	case isFuzzing():
		// A fuzz target explores inputs, not engines: a second run would fuzz again on a server
		// whose round trips slow each input a hundredfold (its seeds run on both in go test).
		testPGErr = errors.New("-fuzz runs on bbolt only")
	default:
		srv, testPGErr = pgtest.Start(context.Background())
		if testPGErr != nil && (os.Getenv("CI") == "true" || !errors.Is(testPGErr, pgtest.ErrMissing)) {
			fmt.Fprintf(os.Stderr, "orchestrator: cannot run the tests on PostgreSQL: %v\n", testPGErr)
			os.Exit(1)
		}
	}
	testPGServer = srv
	code := m.Run()
	if srv != nil {
		if code == 0 {
			testPG = srv
			fmt.Fprintf(os.Stderr, "orchestrator: the same tests again on PostgreSQL (%s)\n", srv.URL)
			code = m.Run()
		}
		srv.Stop()
	}
	os.Exit(code)
}

// TestPostgreSQLRun says, skipping, when the suite runs on bbolt only.
func TestPostgreSQLRun(t *testing.T) {
	switch {
	case isShort():
		t.Skip("-short: the suite runs on bbolt only")
	case testPGErr != nil:
		t.Skipf("the suite runs on bbolt only: %v", testPGErr)
	}
}

// isFuzzing reports whether go test runs with -fuzz.
func isFuzzing() bool {
	for _, a := range os.Args {
		if strings.HasPrefix(a, "-test.fuzz=") && a != "-test.fuzz=" {
			return true
		}
	}
	return false
}

func isShort() bool {
	for _, a := range os.Args {
		if a == "-test.short=true" || a == "-test.short" {
			return true
		}
	}
	return false
}

// testDatabaseURL is a fresh schema of the suite's PostgreSQL server, or "" on bbolt.
func testDatabaseURL(t testing.TB) string {
	t.Helper()
	if testPG == nil {
		return ""
	}
	u, err := testPG.Schema(t.Context())
	if err != nil {
		t.Fatalf("create a schema for the test: %v", err)
	}
	t.Logf("store: PostgreSQL, %s", u)
	return u + "&pool_max_conns=4"
}

// pgSchema is a fresh schema of the suite's PostgreSQL server in either run, for the tests of
// PostgreSQL alone; without the server they are skipped (TestMain fails the run under CI=true).
func pgSchema(t *testing.T) string {
	t.Helper()
	if testPGServer == nil {
		t.Skipf("needs PostgreSQL: %v", testPGErr)
	}
	u, err := testPGServer.Schema(t.Context())
	if err != nil {
		t.Fatalf("create a schema for the test: %v", err)
	}
	return u + "&pool_max_conns=4"
}
