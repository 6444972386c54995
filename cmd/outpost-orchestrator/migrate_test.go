package main

import (
	"encoding/json"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/spf13/pflag"

	"github.com/outpost-dev/terraform-provider-outpost/internal/api"
	"github.com/outpost-dev/terraform-provider-outpost/internal/client/clienttest"
	"github.com/outpost-dev/terraform-provider-outpost/internal/keys"
	"github.com/outpost-dev/terraform-provider-outpost/internal/pgtest"
)

// TestMigrateStoreThenServeOnPostgreSQL is the move a user makes: serve on a data directory,
// stop, copy it with migrate-store, serve with --database-url. The runner made before the move
// is there after it, and the database URL (with its password) appears in no log line.
func TestMigrateStoreThenServeOnPostgreSQL(t *testing.T) {
	pg, err := pgtest.Start(t.Context())
	if err != nil {
		if os.Getenv("CI") != "true" && errors.Is(err, pgtest.ErrMissing) {
			t.Skip(err)
		}
		t.Fatal(err)
	}
	t.Cleanup(pg.Stop)
	dir := filepath.Join(t.TempDir(), "data")
	const token = "admin-token-for-tests-0123456789"
	srv := startServe(t, dir, "--admin-token", token)
	put := func(addr, path, body string) {
		t.Helper()
		req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, "http://"+addr+path, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+token)
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusCreated {
			t.Fatalf("POST %s: HTTP %d", path, resp.StatusCode)
		}
	}
	put(srv.addr, "/api/v1/orgs/acme/state-storages", `{"id":"state","type":"kubernetes","kubernetes":{"namespace":"outpost-state"}}`)
	pub, _, err := keys.Generate()
	if err != nil {
		t.Fatal(err)
	}
	pem, err := keys.EncodePublicPEM(pub)
	if err != nil {
		t.Fatal(err)
	}
	runner, _ := json.Marshal(api.RunnerInput{ID: "r1", StateStorageID: "state", PublicKeys: []string{pem},
		Job: api.RunnerJob{Namespace: "jobs", ServiceAccount: "job"}})
	put(srv.addr, "/api/v1/orgs/acme/runners", string(runner))
	if err := srv.stop(); err != nil {
		t.Fatal(err)
	}

	// The URL carries a password the server does not check (trust authentication), so a leak
	// would show.
	url := strings.Replace(pg.URL, "outpost@", "outpost:leak-me-not@", 1)
	var out clienttest.Buffer
	if err := run(t.Context(), []string{"migrate-store", "--from", dir, "--to", url}, noEnv, &out, nil); err != nil {
		t.Fatalf("migrate-store: %v\n%s", err, out.String())
	}
	if !strings.Contains(out.String(), "1 runners, 1 state storages (0 reported states, 0 drift marks), 0 schedules") {
		t.Fatalf("migrate-store said:\n%s", out.String())
	}
	onPG := startServe(t, t.TempDir(), "--database-url", url, "--admin-token", token)
	if code := get(t, "http://"+onPG.addr+"/api/v1/orgs/acme/runners/r1", token); code != http.StatusOK {
		t.Fatalf("runner after the move: HTTP %d", code)
	}
	if err := onPG.stop(); err != nil {
		t.Fatal(err)
	}
	if logs := onPG.logs.String() + out.String(); strings.Contains(logs, "leak-me-not") || !strings.Contains(logs, "store=postgresql") {
		t.Fatalf("logs:\n%s", logs)
	}
	err = run(t.Context(), []string{"--database-url", url}, noEnv, &out, nil)
	if err == nil || !strings.Contains(err.Error(), "--admin-token") {
		t.Fatalf("--database-url without an admin token: %v", err)
	}
}

// migrate-store reads --from and --to from the variables of the serve flags they stand for; a
// bad variable is named, and --help never prints the database URL.
func TestMigrateStoreFlagsFromEnvironment(t *testing.T) {
	env := map[string]string{envName("data-dir"): "/does/not/exist", envName("database-url"): "postgres://u:leak-me-not@db.example/x",
		envName("database-insecure-tls"): "maybe"}
	getenv := func(k string) string { return env[k] }
	var out clienttest.Buffer
	if err := run(t.Context(), []string{"migrate-store"}, getenv, &out, nil); err == nil || !strings.Contains(err.Error(), envName("database-insecure-tls")+`="maybe"`) {
		t.Errorf("a bad %s: %v", envName("database-insecure-tls"), err)
	}
	var help clienttest.Buffer
	if err := run(t.Context(), []string{"migrate-store", "--help"}, getenv, &help, nil); !errors.Is(err, pflag.ErrHelp) {
		t.Errorf("--help: %v", err)
	}
	if strings.Contains(help.String(), "leak-me-not") || !strings.Contains(help.String(), "/does/not/exist") {
		t.Errorf("--help shows the database URL, or not the data directory from the environment:\n%s", help.String())
	}
}
