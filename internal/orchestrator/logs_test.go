package orchestrator

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/outpost-dev/terraform-provider-outpost/internal/api"
	"github.com/outpost-dev/terraform-provider-outpost/internal/orchestrator/store"
)

// readLog reads a log of a deployment of acme.
func (h *harness) readLog(id string, offset, limit int64) api.LogChunk {
	h.t.Helper()
	var c api.LogChunk
	path := orgPath("acme") + "/deployments/" + id + "/logs?offset=" + strconv.FormatInt(offset, 10)
	if limit > 0 {
		path += "&limit=" + strconv.FormatInt(limit, 10)
	}
	h.mustAdmin(http.MethodGet, path, nil, http.StatusOK, &c)
	return c
}

func mustAppend(t *testing.T, h *harness, token string, offset int64, data string) api.LogAppendResponse {
	t.Helper()
	r := h.appendLog(token, offset, data)
	if r.code != http.StatusOK {
		t.Fatalf("append %q at %d: HTTP %d %s", data, offset, r.code, r.body)
	}
	var out api.LogAppendResponse
	r.decode(t, &out)
	return out
}

func TestLogAppendByOffset(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	a := h.setupRunner("acme", "r1", 1)
	d := h.deploy(api.OperationPlan)
	tok := a.claim(d.ID, 1, "pod").JobToken

	if got := mustAppend(t, h, tok, 0, "hello\n"); got.CommittedOffset != 6 {
		t.Fatalf("committed %d after 6 bytes", got.CommittedOffset)
	}
	mustAppend(t, h, tok, 6, "world\n")
	// A resend of committed bytes is acknowledged and changes nothing.
	if got := mustAppend(t, h, tok, 0, "hello\n"); got.CommittedOffset != 12 {
		t.Fatalf("duplicate resend: committed %d, want 12", got.CommittedOffset)
	}
	// A resend that overlaps and extends keeps only the new tail.
	if got := mustAppend(t, h, tok, 6, "world\nagain\n"); got.CommittedOffset != 18 {
		t.Fatalf("overlapping resend: committed %d, want 18", got.CommittedOffset)
	}
	// A gap is refused with the committed offset, so the writer can resume there.
	r := h.appendLog(tok, 25, "lost?\n")
	if r.code != http.StatusConflict {
		t.Fatalf("gap: HTTP %d %s, want 409", r.code, r.body)
	}
	if e := r.err(t); e.Code != api.CodeOffsetMismatch || e.CommittedOffset == nil || *e.CommittedOffset != 18 {
		t.Fatalf("gap error %+v, want offset_mismatch with committed_offset 18", e)
	}
	if c := h.readLog(d.ID, 0, 0); string(c.Data) != "hello\nworld\nagain\n" || c.NextOffset != 18 || c.Complete || c.Truncated {
		t.Fatalf("log chunk %+v (%q)", c, c.Data)
	}
	// Reads across chunk boundaries by offset and limit.
	if c := h.readLog(d.ID, 3, 7); string(c.Data) != "lo\nworl" || c.Offset != 3 || c.NextOffset != 10 {
		t.Fatalf("read 3+7: %q next %d", c.Data, c.NextOffset)
	}
	if c := h.readLog(d.ID, 18, 0); len(c.Data) != 0 || c.NextOffset != 18 {
		t.Fatalf("read at end: %q next %d", c.Data, c.NextOffset)
	}
	if r := h.admin(http.MethodGet, orgPath("acme")+"/deployments/"+d.ID+"/logs?offset=19", nil); r.code != http.StatusBadRequest || r.err(t).Field != "offset" {
		t.Fatalf("read beyond the end: HTTP %d %s", r.code, r.body)
	}
	// Wrong Content-Type and missing offset are refused without change.
	if r := h.job(tok, http.MethodPost, "/api/v1/job/logs?offset=18", "application/json", []byte(`"x"`)); r.code != http.StatusUnsupportedMediaType {
		t.Fatalf("JSON log body: HTTP %d", r.code)
	}
	if r := h.job(tok, http.MethodPost, "/api/v1/job/logs", "application/octet-stream", []byte("x")); r.code != http.StatusBadRequest || r.err(t).Field != "offset" {
		t.Fatalf("no offset: HTTP %d %s", r.code, r.body)
	}
	if got := h.deployment(d.ID).LogSize; got != 18 {
		t.Fatalf("log size %d after refused appends, want 18", got)
	}

	// Outputs: uploaded by the job, read by the admin.
	outs := api.Outputs{"url": {Value: json.RawMessage(`"https://x"`), Type: json.RawMessage(`"string"`)}}
	if r := h.job(tok, http.MethodPut, "/api/v1/job/outputs", "application/json", jsonBytes(t, outs)); r.code != http.StatusNoContent {
		t.Fatalf("put outputs: HTTP %d %s", r.code, r.body)
	}
	if r := h.job(tok, http.MethodPut, "/api/v1/job/outputs", "application/json", []byte(`{"url":{"value":1,"secret":true}}`)); r.code != http.StatusBadRequest || r.err(t).Field != "url.secret" {
		t.Fatalf("outputs with an unknown field: HTTP %d %s", r.code, r.body)
	}
	var got api.Outputs
	h.mustAdmin(http.MethodGet, orgPath("acme")+"/deployments/"+d.ID+"/outputs", nil, http.StatusOK, &got)
	if string(got["url"].Value) != `"https://x"` || len(got) != 1 {
		t.Fatalf("outputs %+v", got)
	}
}

func TestLogCapTruncatesWithMarker(t *testing.T) {
	t.Parallel()
	const logCap = 32
	h := newHarness(t, func(c *testConfig) { c.LogCapBytes = logCap })
	a := h.setupRunner("acme", "r1", 1)
	d := h.deploy(api.OperationPlan)
	c := a.claim(d.ID, 1, "pod")

	mustAppend(t, h, c.JobToken, 0, strings.Repeat("a", 20))
	got := mustAppend(t, h, c.JobToken, 20, strings.Repeat("b", 20))
	if !got.Truncated || got.CommittedOffset != 40 {
		t.Fatalf("append past the cap: %+v, want truncated with committed offset 40 (dropped bytes still count)", got)
	}
	// Later bytes are counted, not kept; the marker is written once.
	if got := mustAppend(t, h, c.JobToken, 40, "more\n"); !got.Truncated || got.CommittedOffset != 45 {
		t.Fatalf("append after truncation: %+v", got)
	}
	marker := store.TruncationMarker(logCap)
	want := strings.Repeat("a", 20) + strings.Repeat("b", 12) + "\n" + marker
	a.mustOK("/api/v1/agent/deployments/"+d.ID+"/events", api.EventRequest{Fencing: c.Lease.Fencing, Event: api.Event{Attempt: 1, Seq: 1, Type: api.EventFinished, Result: api.StatusFailed}}, nil)
	chunk := h.readLog(d.ID, 0, 0)
	if string(chunk.Data) != want || !chunk.Truncated || !chunk.Complete {
		t.Fatalf("truncated log %q (truncated %v complete %v), want %q", chunk.Data, chunk.Truncated, chunk.Complete, want)
	}
	if !strings.HasSuffix(string(chunk.Data), "[outpost: log truncated at 32 bytes]\n") {
		t.Fatalf("log does not end with the marker: %q", chunk.Data)
	}
	if dep := h.deployment(d.ID); !dep.LogTruncated || dep.LogSize != int64(len(want)) {
		t.Fatalf("deployment log_size %d truncated %v", dep.LogSize, dep.LogTruncated)
	}
}

func TestLogOfARetriedAttemptIsMarked(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	a := h.setupRunner("acme", "r1", 1)
	d := h.deploy(api.OperationPlan)
	c1 := a.claim(d.ID, 1, "pod")
	mustAppend(t, h, c1.JobToken, 0, "first try\n")
	h.clock.Advance(DefaultLeaseDuration + 1)
	h.sweep()
	c2 := a.claim(d.ID, 2, "pod")
	// The new attempt writes from offset 0 of its own run.
	if got := mustAppend(t, h, c2.JobToken, 0, "second try\n"); got.CommittedOffset != 11 {
		t.Fatalf("attempt 2 committed %d, want 11", got.CommittedOffset)
	}
	log := string(h.readLog(d.ID, 0, 0).Data)
	want := "first try\n\n[outpost: attempt 2 starts here; the lines above are from earlier attempts]\nsecond try\n"
	if log != want {
		t.Fatalf("log %q, want %q", log, want)
	}
}

// Outputs beyond the cap are cut, not refused: they arrive after the apply changed the
// infrastructure, so a refusal would fail a deployment for something that already happened.
// A job runner that caps them itself says how many it left out; one that does not (an older
// release) sends them all and the orchestrator keeps the first api.MaxOutputs by name. Names are
// HCL identifiers, as Terraform takes them, Unicode letters included.
func TestOutputsBeyondTheCapAreCutNotRefused(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	a := h.setupRunner("acme", "r1", 1)
	d := h.deploy(api.OperationApply)
	tok := a.claim(d.ID, 1, "pod").JobToken

	outs := api.Outputs{"größe": {Value: json.RawMessage(`1`)}}
	for i := range api.MaxOutputs + 200 {
		outs[fmt.Sprintf("o%04d", i)] = api.Output{Value: json.RawMessage(`"v"`)}
	}
	if r := h.job(tok, http.MethodPut, "/api/v1/job/outputs", "application/json", jsonBytes(t, outs)); r.code != http.StatusNoContent {
		t.Fatalf("put %d outputs: HTTP %d %s", len(outs), r.code, r.body)
	}
	var got api.Outputs
	h.mustAdmin(http.MethodGet, orgPath("acme")+"/deployments/"+d.ID+"/outputs", nil, http.StatusOK, &got)
	_, last := got["o0998"]
	_, next := got["o0999"]
	if len(got) != api.MaxOutputs || !last || next {
		t.Fatalf("%d outputs stored (o0998 among them: %v, o0999: %v), want the first %d by name (größe, o0000 … o0998)", len(got), last, next, api.MaxOutputs)
	}
	if dep := h.deployment(d.ID); dep.OutputsOmitted != 201 {
		t.Fatalf("outputs_omitted %d, want 201", dep.OutputsOmitted)
	}

	// A job runner that left 3 out itself; "größe" is a valid name.
	few := api.Outputs{"größe": {Value: json.RawMessage(`1`)}, "url": {Value: json.RawMessage(`"https://x"`)}}
	if r := h.job(tok, http.MethodPut, "/api/v1/job/outputs?omitted=3", "application/json", jsonBytes(t, few)); r.code != http.StatusNoContent {
		t.Fatalf("put outputs with omitted=3: HTTP %d %s", r.code, r.body)
	}
	got = nil
	h.mustAdmin(http.MethodGet, orgPath("acme")+"/deployments/"+d.ID+"/outputs", nil, http.StatusOK, &got)
	if dep := h.deployment(d.ID); len(got) != 2 || dep.OutputsOmitted != 3 {
		t.Fatalf("%d outputs, outputs_omitted %d; want 2 and 3", len(got), dep.OutputsOmitted)
	}
	if r := h.job(tok, http.MethodPut, "/api/v1/job/outputs?omitted=-1", "application/json", jsonBytes(t, few)); r.code != http.StatusBadRequest || r.err(t).Field != "omitted" {
		t.Fatalf("omitted=-1: HTTP %d %s", r.code, r.body)
	}
}
