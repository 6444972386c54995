package console_test

import (
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/outpost-dev/terraform-provider-outpost/internal/api"
	"github.com/outpost-dev/terraform-provider-outpost/internal/orchestrator/orchestratortest"
)

// TestLogStreamsMemory opens OUTPOST_CONSOLE_STREAMS (default 500) live log streams of one
// running deployment through a real orchestrator on loopback and reports what they cost the
// process: heap and stacks in use, and goroutines, once every stream has had its first event and
// sits waiting. The browsers' side (one HTTP connection each) is in the same process, so the
// figures bound the orchestrator's share from above. With OUTPOST_CONSOLE_BENCH=1 it opens the
// 500; otherwise, in make test, 20, so the measured code keeps working.
func TestLogStreamsMemory(t *testing.T) {
	n := 20
	if os.Getenv("OUTPOST_CONSOLE_BENCH") != "" {
		n = 500
	}
	if v := os.Getenv("OUTPOST_CONSOLE_STREAMS"); v != "" {
		_, _ = fmt.Sscan(v, &n)
	}
	inst := orchestratortest.Start(t)
	ctx := t.Context()
	admin, key := inst.RegisterRunner(ctx, t)
	d, err := admin.CreateDeployment(ctx, api.DeploymentInput{RunnerID: "r1", Operation: api.OperationPlan, StateKey: "k",
		Source: api.Source{Inline: &api.InlineSource{ArchiveTarGz: orchestratortest.TarGz(t, map[string]string{"main.tf": ""})}}})
	if err != nil {
		t.Fatal(err)
	}
	run := inst.NewAgent(t, "acme", "r1", key, "v1").Claim(ctx, d.ID)
	run.Log(ctx, "Initializing the backend...\n")
	cookie := signInCookie(t, inst.URL, inst.AdminToken, "acme")
	before := memNow()
	tr := &http.Transport{MaxIdleConnsPerHost: -1}
	defer tr.CloseIdleConnections()
	hc := &http.Client{Transport: tr}
	var bodies []io.ReadCloser
	defer func() {
		for _, b := range bodies {
			_ = b.Close()
		}
	}()
	for range n {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, inst.URL+"/orgs/acme/deployments/"+d.ID+"/log", nil)
		if err != nil {
			t.Fatal(err)
		}
		req.AddCookie(cookie)
		resp, err := hc.Do(req) //nolint:bodyclose // kept open on purpose; closed with bodies when the test ends
		if err != nil {
			t.Fatal(err)
		}
		bodies = append(bodies, resp.Body)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("stream answered %d", resp.StatusCode)
		}
		// The retry line, then the first log event.
		buf := make([]byte, 256)
		got := ""
		for !strings.Contains(got, "event: log") {
			k, err := resp.Body.Read(buf)
			if err != nil {
				t.Fatal(err)
			}
			got += string(buf[:k])
		}
	}
	time.Sleep(2 * time.Second) // every stream past a few of its one-second reads
	after := memNow()
	t.Logf("%d open log streams: heap in use +%.1f MiB, stacks +%.1f MiB, goroutines +%d (both ends of every connection)",
		n, float64(after.heap-before.heap)/(1<<20), float64(after.stack-before.stack)/(1<<20), after.goroutines-before.goroutines)
}

type memFigures struct {
	heap, stack uint64
	goroutines  int
}

func memNow() memFigures {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return memFigures{heap: m.HeapInuse, stack: m.StackInuse, goroutines: runtime.NumGoroutine()}
}

// signInCookie signs in and returns the session cookie.
func signInCookie(t *testing.T, base, token, org string) *http.Cookie {
	t.Helper()
	form := url.Values{"token": {token}, "org": {org}}
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, base+"/signin", strings.NewReader(form.Encode()))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	c := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	for _, ck := range resp.Cookies() {
		if ck.Name == "outpost_session" {
			return ck
		}
	}
	t.Fatalf("sign-in answered %d without a session cookie", resp.StatusCode)
	return nil
}
