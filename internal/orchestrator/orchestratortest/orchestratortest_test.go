package orchestratortest_test

import (
	"bytes"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/outpost-dev/terraform-provider-outpost/internal/orchestrator/orchestratortest"
)

func do(t *testing.T, inst *orchestratortest.Instance, method, path, body string) (int, string) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), method, inst.URL+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+inst.AdminToken)
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func TestStartAndRestartKeepDataAndAddress(t *testing.T) {
	t.Parallel()
	clock := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	inst := orchestratortest.Start(t, orchestratortest.WithClock(func() time.Time { return clock }))
	if inst.URL == "" || inst.AdminToken == "" || inst.DataDir == "" || inst.Server == nil {
		t.Fatalf("instance %+v is incomplete", inst)
	}
	code, body := do(t, inst, http.MethodPost, "/api/v1/orgs/acme/state-storages",
		`{"id":"state","type":"kubernetes","kubernetes":{"namespace":"outpost-state"}}`)
	if code != http.StatusCreated || !strings.Contains(body, `"created_at":"2030-01-02T03:04:05Z"`) {
		t.Fatalf("create: HTTP %d %s (the clock option must be used)", code, body)
	}
	url := inst.URL
	inst.Restart(t)
	if inst.URL != url {
		t.Fatalf("URL changed across Restart: %s → %s", url, inst.URL)
	}
	code, body = do(t, inst, http.MethodGet, "/api/v1/orgs/acme/state-storages/state", "")
	if code != http.StatusOK || !bytes.Contains([]byte(body), []byte(`"outpost-state"`)) {
		t.Fatalf("after restart: HTTP %d %s", code, body)
	}
	inst.Sweep(t)
}
