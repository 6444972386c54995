package console

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/outpost-dev/terraform-provider-outpost/internal/api"
	"github.com/outpost-dev/terraform-provider-outpost/internal/orchestrator/store"
	"github.com/outpost-dev/terraform-provider-outpost/internal/orchestrator/store/storetest"
)

// TestRenderLatency measures the server-side render of the deployments list and of a deployment
// page with OUTPOST_CONSOLE_DEPLOYMENTS (default 10,000) deployments in the store, on both
// engines, next to the store read the API's list makes for the same data. With
// OUTPOST_CONSOLE_BENCH=1 it fills the 10,000 (which takes a while); otherwise, in make test, it
// renders the same pages over 200 deployments, so the measured code keeps working.
func TestRenderLatency(t *testing.T) {
	n := 200
	if os.Getenv("OUTPOST_CONSOLE_BENCH") != "" {
		n = 10000
	}
	if v := os.Getenv("OUTPOST_CONSOLE_DEPLOYMENTS"); v != "" {
		_, _ = fmt.Sscan(v, &n)
	}
	storetest.Each(t, func(t *testing.T, eng store.Engine) {
		ctx := t.Context()
		st := store.New(eng, store.Options{Secret: make([]byte, 32), Now: time.Now, LogCap: 1 << 20,
			Quotas: store.Quotas{QueuedDeployments: n + 1}})
		if _, err := st.CreateStorage(ctx, "acme", api.StateStorageInput{ID: "s", Type: api.StateStorageKubernetes,
			Kubernetes: &api.KubernetesStateSpec{Namespace: "states"}}); err != nil {
			t.Fatal(err)
		}
		if _, err := st.CreateRunner(ctx, "acme", api.RunnerInput{ID: "r1", StateStorageID: "s",
			Job: api.RunnerJob{Namespace: "jobs", ServiceAccount: "sa"}}); err != nil {
			t.Fatal(err)
		}
		fill := time.Now()
		var last string
		for i := range n {
			d, err := st.CreateDeployment(ctx, "acme", api.DeploymentInput{RunnerID: "r1", Operation: api.OperationPlan,
				StateKey: fmt.Sprintf("k/%d", i%50), Source: api.Source{Inline: &api.InlineSource{ArchiveTarGz: []byte{0x1f, 0x8b, 0x08, 0x00}}}})
			if err != nil {
				t.Fatal(err)
			}
			last = d.ID
		}
		t.Logf("filled %d deployments in %s", n, time.Since(fill).Round(time.Millisecond))
		c, err := New(Config{Store: st, Authenticate: func(context.Context, string) (Principal, error) { return Principal{}, nil },
			Connected: func(string, *api.Runner) bool { return true }, Version: "v1"})
		if err != nil {
			t.Fatal(err)
		}
		v := &visit{sess: &store.SessionRecord{Org: "acme"}, org: "acme", csrf: "x"}
		measure := func(name string, fn func() error) {
			var d []time.Duration
			for range 50 {
				start := time.Now()
				if err := fn(); err != nil {
					t.Fatal(err)
				}
				d = append(d, time.Since(start))
			}
			slices.Sort(d)
			t.Logf("%-40s p50 %6.1f ms  p95 %6.1f ms", name, ms(d[len(d)/2]), ms(d[len(d)*95/100]))
		}
		page := func(path string, h func(http.ResponseWriter, *http.Request, *visit) error) func() error {
			return func() error {
				r := httptest.NewRequestWithContext(ctx, http.MethodGet, path, nil)
				r.SetPathValue("org", "acme")
				r.SetPathValue("id", last)
				w := httptest.NewRecorder()
				if err := h(w, r, v); err != nil {
					return err
				}
				if w.Code != http.StatusOK || w.Body.Len() < 1000 {
					return fmt.Errorf("%s answered %d with %d bytes", path, w.Code, w.Body.Len())
				}
				return nil
			}
		}
		measure("API list read (store.ListDeployments)", func() error { _, err := st.ListDeployments(ctx, "acme", "", ""); return err })
		measure("console deployments list", page("/orgs/acme/deployments", c.deployments))
		measure("console deployments list, status=queued", page("/orgs/acme/deployments?status=queued", c.deployments))
		measure("console deployment page", page("/orgs/acme/deployments/"+last, c.deployment))
		measure("console runners page", page("/orgs/acme/runners", c.runners))
	})
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
