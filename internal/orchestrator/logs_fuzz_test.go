package orchestrator

import (
	"net/http"
	"strconv"
	"testing"

	"github.com/outpost-dev/terraform-provider-outpost/internal/api"
	"github.com/outpost-dev/terraform-provider-outpost/internal/orchestrator/store"
)

// fuzzLogCap keeps the fuzzed logs short enough to cross the cap often.
const fuzzLogCap = 64

// FuzzLogOffsets sends a sequence of log appends at fuzzed offsets (resends, partial resends,
// gaps, empty bodies) and fuzzed reads through the real HTTP API, and compares every answer
// with a model: the committed stream grows only by the bytes past the committed offset, a gap
// is refused with the committed offset, the stored log is the stream cut at the cap plus the
// truncation marker once, and a read returns exactly the stored bytes it names.
// Each op is three bytes: how far before the committed offset to write (a value past 24 makes
// a gap), the length, and the first byte of the content. Seeds: testdata/fuzz/FuzzLogOffsets.
func FuzzLogOffsets(f *testing.F) {
	f.Add([]byte{4, 6, 'a', 0, 10, 'b', 30, 3, 'c', 2, 40, '\n', 0, 40, 'x'}, uint16(3), uint16(7))
	// One server for every input (a server per input makes the fuzzer crawl); each input gets
	// a deployment of its own, finished at the end so the next may claim the state key.
	h := newHarness(f, func(c *testConfig) { c.LogCapBytes = fuzzLogCap })
	a := h.setupRunner("acme", "r1", 1)
	f.Cleanup(func() { h.t = f }) // the server closes after the last input's test has ended
	f.Fuzz(func(t *testing.T, ops []byte, readOff, readLimit uint16) {
		h.t = t
		if len(ops) > 3*40 {
			ops = ops[:3*40]
		}
		d := h.deploy(api.OperationPlan)
		cl := a.claim(d.ID, 1, "pod")
		tok := cl.JobToken
		defer func() {
			if r := a.event(d.ID, api.EventRequest{Fencing: cl.Lease.Fencing, Event: api.Event{Attempt: 1, Seq: 1, Type: api.EventFinished, Result: api.StatusSucceeded}}); r.code != http.StatusOK {
				t.Fatalf("finish deployment: HTTP %d %s", r.code, r.body)
			}
		}()
		var stream []byte
		for ; len(ops) >= 3; ops = ops[3:] {
			back, n, first := int64(ops[0]), int(ops[1]%48), ops[2]
			offset := int64(len(stream)) - back
			if back > 24 {
				offset = int64(len(stream)) + back - 24 // a gap
			}
			data := make([]byte, n)
			for i := range data {
				data[i] = first + byte(i)*7
			}
			r := h.appendLog(tok, offset, string(data))
			switch {
			case offset < 0:
				if r.code != http.StatusBadRequest {
					t.Fatalf("append at %d: HTTP %d %s, want 400", offset, r.code, r.body)
				}
				continue
			case offset > int64(len(stream)):
				e := r.err(t)
				if r.code != http.StatusConflict || e.Code != api.CodeOffsetMismatch || e.CommittedOffset == nil || *e.CommittedOffset != int64(len(stream)) {
					t.Fatalf("gap at %d (committed %d): HTTP %d %s", offset, len(stream), r.code, r.body)
				}
				continue
			}
			if end := offset + int64(n); end > int64(len(stream)) {
				stream = append(stream, data[int64(len(stream))-offset:]...)
			}
			if r.code != http.StatusOK {
				t.Fatalf("append %d bytes at %d: HTTP %d %s", n, offset, r.code, r.body)
			}
			var got api.LogAppendResponse
			r.decode(t, &got)
			if got.CommittedOffset != int64(len(stream)) || got.Truncated != (len(stream) > fuzzLogCap) {
				t.Fatalf("append %d bytes at %d: %+v, want committed %d truncated %v", n, offset, got, len(stream), len(stream) > fuzzLogCap)
			}
		}
		stored := storedLog(stream)
		if c := h.readLog(d.ID, 0, 0); string(c.Data) != string(stored) || c.NextOffset != int64(len(stored)) {
			t.Fatalf("log %q, want %q", c.Data, stored)
		}
		off, limit := int64(readOff)%int64(len(stored)+2), int64(readLimit%80)+1
		path := orgPath("acme") + "/deployments/" + d.ID + "/logs?offset=" + strconv.FormatInt(off, 10) + "&limit=" + strconv.FormatInt(limit, 10)
		r := h.admin(http.MethodGet, path, nil)
		if off > int64(len(stored)) {
			if r.code != http.StatusBadRequest {
				t.Fatalf("read at %d of %d bytes: HTTP %d", off, len(stored), r.code)
			}
			return
		}
		if r.code != http.StatusOK {
			t.Fatalf("read %d+%d: HTTP %d %s", off, limit, r.code, r.body)
		}
		var c api.LogChunk
		r.decode(t, &c)
		want := stored[off:]
		if int64(len(want)) > limit {
			want = want[:limit]
		}
		if string(c.Data) != string(want) || c.Offset != off || c.NextOffset != off+int64(len(want)) {
			t.Fatalf("read %d+%d: %q next %d, want %q", off, limit, c.Data, c.NextOffset, want)
		}
	})
}

// storedLog is what the orchestrator keeps of a stream: all of it under the cap, else the bytes
// up to the cap and the truncation marker on a line of its own.
func storedLog(stream []byte) []byte {
	if len(stream) <= fuzzLogCap {
		return stream
	}
	out := append([]byte(nil), stream[:fuzzLogCap]...)
	if out[len(out)-1] != '\n' {
		out = append(out, '\n')
	}
	return append(out, store.TruncationMarker(fuzzLogCap)...)
}
