package e2e

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	kubeexec "github.com/outpost-dev/terraform-provider-outpost/agent/internal/executor/kubernetes"
	"github.com/outpost-dev/terraform-provider-outpost/agent/internal/statestore"
	"github.com/outpost-dev/terraform-provider-outpost/internal/api"
	"github.com/outpost-dev/terraform-provider-outpost/internal/porttest"
	"github.com/outpost-dev/terraform-provider-outpost/internal/testbed"
)

// agentMemoryLimit is the chart's memory limit of the agent container.
const agentMemoryLimit = 256 << 20

// stateBody streams a valid state of about size bytes (a hex payload, which compresses to about
// half, as states full of ids do) without holding it.
type stateBody struct {
	head, tail []byte
	left       int64
}

func newStateBody(lineage string, size int64) *stateBody {
	return &stateBody{head: fmt.Appendf(nil, `{"version":4,"serial":1,"lineage":%q,"resources":[],"payload":"`, lineage), tail: []byte(`"}`), left: size}
}

func (b *stateBody) Read(p []byte) (int, error) {
	var n int
	switch {
	case len(b.head) > 0:
		n = copy(p, b.head)
		b.head = b.head[n:]
	case b.left > 0:
		raw := make([]byte, min(int64(len(p)/2), b.left/2+1, 32<<10))
		_, _ = rand.Read(raw)
		n = copy(p, hex.EncodeToString(raw))
		n = int(min(int64(n), b.left))
		b.left -= int64(n)
	case len(b.tail) > 0:
		n = copy(p, b.tail)
		b.tail = b.tail[n:]
	default:
		return 0, io.EOF
	}
	return n, nil
}

// upload streams a state to the agent's state backend without a Content-Length, the way a
// hostile job would to get past an early size check, retrying 429 and 503 as the CLIs do. Its
// detail starts with the SHA-256 of the body when the transport read all of it ("-" otherwise).
func upload(t *testing.T, addr, key, user, token, lineage string, size int64) (int, string) {
	t.Helper()
	for try := 0; ; try++ {
		body := &hashingBody{r: newStateBody(lineage, size), h: sha256.New()}
		req, _ := http.NewRequestWithContext(t.Context(), "POST", "http://"+addr+"/v1/states/"+key, body)
		req.ContentLength = -1
		req.SetBasicAuth(user, token)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return 0, err.Error()
		}
		b, _ := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		if (resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode == http.StatusServiceUnavailable) && try < 30 {
			time.Sleep(time.Second)
			continue
		}
		return resp.StatusCode, body.sum() + " " + string(b)
	}
}

// hashingBody is a request body that hashes what the transport reads of it. The transport may
// go on reading after Do returned (a server that answers before the body's end, as with 413),
// so hashing and taking the sum share a lock: a sum taken while the transport wrote into the
// hash once panicked inside crypto/sha256 ("d.nx != 0").
type hashingBody struct {
	r   io.Reader
	mu  sync.Mutex
	h   hash.Hash
	eof bool
}

func (b *hashingBody) Read(p []byte) (int, error) {
	n, err := b.r.Read(p)
	b.mu.Lock()
	defer b.mu.Unlock()
	b.h.Write(p[:n])
	if errors.Is(err, io.EOF) {
		b.eof = true
	}
	return n, err
}

func (b *hashingBody) Close() error { return nil }

// sum is the hex SHA-256 of the body once it was read to its end, else "-".
func (b *hashingBody) sum() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.eof {
		return "-"
	}
	return hex.EncodeToString(b.h.Sum(nil))
}

// peakRSS is the process's peak resident set (VmHWM) in bytes.
func peakRSS(t *testing.T, pid int) int64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) == 3 && f[0] == "VmHWM:" {
			kb, _ := strconv.ParseInt(f[1], 10, 64)
			return kb << 10
		}
	}
	t.Fatal("no VmHWM in /proc status")
	return 0
}

// TestStateUploadsStayWithinTheMemoryLimit: four apply jobs each stream an oversize state and a
// state at the body limit into the agent at once. The oversize ones are refused with 413 and
// leave nothing behind, the others are stored, and the agent stays up with a peak resident set
// under the chart's memory limit (GOMEMLIMIT set from it, as the chart does).
func TestStateUploadsStayWithinTheMemoryLimit(t *testing.T) {
	e := newEnv(t, `{"metadata":{"annotations":{"testbed.outpost.dev/run-duration":"10m"}},"spec":{"containers":[{"name":"main"}]}}`, 5)
	e.agentEnv = []string{fmt.Sprintf("GOMEMLIMIT=%d", agentMemoryLimit)}
	const limit = 24 << 20
	stateAddr, healthAddr := porttest.Addr(t), porttest.Addr(t)
	a := e.startAgent("agent-0", "--leader-elect=false", "--state-listen", stateAddr, "--health-listen", healthAddr,
		"--state-url", "http://"+stateAddr, "--state-max-body-bytes", strconv.Itoa(limit))
	ctx := t.Context()
	var ids []string
	for i := range 4 {
		d, err := e.admin.CreateDeployment(ctx, api.DeploymentInput{RunnerID: e.runnerID, Operation: api.OperationApply,
			Source: api.Source{Inline: &api.InlineSource{ArchiveTarGz: archive(t)}}, StateKey: fmt.Sprintf("big-%d", i)})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, d.ID)
	}
	tokens := map[string]string{}
	testbed.WaitFor(t, 90*time.Second, "four apply attempts running", func() (bool, string) {
		for _, id := range ids {
			if tokens[id] != "" {
				continue
			}
			j, err := e.cluster.Client().BatchV1().Jobs(e.ns).Get(ctx, kubeexec.JobName(id, 1), metav1.GetOptions{})
			if err != nil {
				return false, err.Error()
			}
			s, err := e.cluster.Client().CoreV1().Secrets(e.ns).Get(ctx, kubeexec.TokenSecretName(j.Name, j.Annotations[kubeexec.AnnTokenSHA256]), metav1.GetOptions{})
			if err != nil {
				return false, err.Error()
			}
			tokens[id] = string(s.Data["state-token"])
		}
		return true, ""
	})

	type result struct {
		id       string
		oversize bool
		code     int
		detail   string
	}
	results := make(chan result, 2*len(ids))
	var wg sync.WaitGroup
	began := time.Now()
	for i, id := range ids {
		for _, oversize := range []bool{true, false} {
			wg.Go(func() {
				size := int64(limit - 4096)
				if oversize {
					size = 4 * limit
				}
				code, detail := upload(t, stateAddr, fmt.Sprintf("big-%d", i), id, tokens[id], "l-"+id, size)
				results <- result{id, oversize, code, detail}
			})
		}
	}
	wg.Wait()
	close(results)
	t.Logf("8 uploads (4 × %d MiB refused, 4 × %d MiB stored) in %s", 4*limit>>20, limit>>20, time.Since(began).Round(time.Second))
	stored := map[string]string{}
	for r := range results {
		switch {
		case r.oversize && r.code != http.StatusRequestEntityTooLarge:
			t.Errorf("oversize upload of %s: %d %s, want 413", r.id, r.code, r.detail)
		case !r.oversize && r.code != http.StatusOK:
			t.Errorf("upload of %s at the limit: %d %s, want 200", r.id, r.code, r.detail)
		case !r.oversize:
			stored[r.id], _, _ = strings.Cut(r.detail, " ")
		}
	}
	select {
	case <-a.done:
		t.Fatal("the agent exited under the uploads")
	default:
	}
	checkHealthz(t, healthAddr)
	peak := peakRSS(t, a.cmd.Process.Pid)
	t.Logf("agent peak resident set %d MiB (limit %d MiB)", peak>>20, agentMemoryLimit>>20)
	if peak >= agentMemoryLimit {
		t.Errorf("agent peak resident set %d MiB, over the chart's %d MiB limit", peak>>20, agentMemoryLimit>>20)
	}
	store := mustStore(statestore.New(e.cluster.Client(), e.ns, statestore.Options{Scope: testOrg}))
	for i, id := range ids {
		key := fmt.Sprintf("big-%d", i)
		hist, err := store.History(ctx, key)
		if err != nil || len(hist) != 1 || hist[0].SHA256 != stored[id] {
			t.Errorf("state %s: history %+v, %v; want the one upload at the limit", key, hist, err)
			continue
		}
		chunks, err := e.cluster.Client().CoreV1().Secrets(e.ns).List(ctx, metav1.ListOptions{
			LabelSelector: statestore.LabelState + "=" + statestore.ScopedHash(testOrg, key) + "," + statestore.LabelRole + "=chunk"})
		if err != nil || len(chunks.Items) != hist[0].Chunks {
			t.Errorf("state %s: %d chunk Secrets, the generation has %d (the refused upload left some behind?)", key, len(chunks.Items), hist[0].Chunks)
		}
	}
}

// checkHealthz asks the agent whether it is up.
func checkHealthz(t *testing.T, addr string) {
	t.Helper()
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodGet, "http://"+addr+"/healthz", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("/healthz: %v", err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("/healthz: %d", resp.StatusCode)
	}
}

// TestUploadDoesNotRaceTheTransport: a server that refuses an upload before reading its body
// (as the state backend does with 413) answers while the HTTP client still sends it. upload must
// not take the body's hash meanwhile: under -race the old TeeReader version fails here, and
// without it the sum once panicked inside crypto/sha256 in `make test`.
func TestUploadDoesNotRaceTheTransport(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.CopyN(io.Discard, r.Body, 64<<10)
		http.Error(w, "too large", http.StatusRequestEntityTooLarge)
	}))
	defer srv.Close()
	addr := strings.TrimPrefix(srv.URL, "http://")
	for range 20 {
		code, detail := upload(t, addr, "k", "u", "t", "l", 8<<20)
		if code != http.StatusRequestEntityTooLarge || !strings.HasPrefix(detail, "- ") {
			t.Fatalf("upload refused early: %d %q, want 413 with no hash", code, detail)
		}
	}
	whole := httptest.NewServer(http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
	}))
	defer whole.Close()
	code, detail := upload(t, strings.TrimPrefix(whole.URL, "http://"), "k", "u", "t", "l", 1<<20)
	if sum, _, _ := strings.Cut(detail, " "); code != http.StatusOK || len(sum) != 64 {
		t.Fatalf("upload read to its end: %d %q, want 200 with the body's SHA-256", code, detail)
	}
}
