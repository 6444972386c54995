package jobrun

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/outpost-dev/terraform-provider-outpost/internal/api"
	"github.com/outpost-dev/terraform-provider-outpost/internal/client"
)

// fakeLogServer implements POST /api/v1/job/logs like the orchestrator: offsets count the
// writer's bytes, a resend of committed bytes is acknowledged, a partial resend keeps only the
// new tail, a gap gets 409 offset_mismatch with the committed offset. It injects faults:
// failBefore is the chance of a 503 before the append is looked at, failAfter the chance that
// the append is committed but the answer is a 503 (a lost response).
type fakeLogServer struct {
	mu         sync.Mutex
	log        []byte
	base       int64 // bytes of someone else at the start of the log ("naive" offsets)
	naive      bool  // offsets are positions in the stored log, not the writer's own count
	strict     bool  // no acknowledgement of resends: any offset but the committed one gets 409
	cap        int
	truncated  bool
	rnd        *rand.Rand
	failBefore float64
	failAfter  float64
	status     int // when set, every request gets this status
	requests   int
	mismatches int
	failures   int
}

func (f *fakeLogServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path != "/api/v1/job/logs" || r.Method != http.MethodPost || r.Header.Get("Authorization") != "Bearer opj_test" {
		http.Error(w, "unexpected request", http.StatusBadRequest)
		return
	}
	body, _ := io.ReadAll(r.Body)
	off, err := strconv.ParseInt(r.URL.Query().Get("offset"), 10, 64)
	if err != nil {
		http.Error(w, "bad offset", http.StatusBadRequest)
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.requests++
	if f.status != 0 {
		writeErr(w, f.status, "unauthorized", "job token refused", nil)
		return
	}
	// The first answer is never lost in strict mode: a writer cannot tell its own lost first
	// append from an earlier writer's bytes there (see logStreamer), and the orchestrator does
	// acknowledge resends.
	faulty := !f.strict || f.requests > 1
	if faulty && f.rnd.Float64() < f.failBefore {
		f.failures++
		writeErr(w, http.StatusServiceUnavailable, "unavailable", "try again", nil)
		return
	}
	committed := int64(len(f.log))
	if !f.naive {
		committed -= f.base
	}
	if off > committed || (f.strict && off != committed) || (f.naive && off < committed && off+int64(len(body)) > committed) {
		f.mismatches++
		writeErr(w, http.StatusConflict, api.CodeOffsetMismatch, "offset mismatch", &committed)
		return
	}
	if end := off + int64(len(body)); end > committed {
		tail := body[committed-off:]
		if f.cap > 0 && len(f.log)+len(tail) > f.cap {
			tail = tail[:max(f.cap-len(f.log), 0)]
			if !f.truncated {
				f.truncated = true
				f.log = append(f.log, tail...)
				f.log = append(f.log, "\n[outpost: log truncated]\n"...)
			}
		} else if !f.truncated {
			f.log = append(f.log, tail...)
		}
		committed = end
	}
	if faulty && f.rnd.Float64() < f.failAfter {
		f.failures++
		writeErr(w, http.StatusServiceUnavailable, "unavailable", "lost response", nil)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(api.LogAppendResponse{CommittedOffset: committed, Truncated: f.truncated})
}

func writeErr(w http.ResponseWriter, status int, code, msg string, committed *int64) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(api.ErrorBody{Error: api.ErrorDetail{Code: code, Message: msg, CommittedOffset: committed}})
}

func (f *fakeLogServer) stored() []byte {
	f.mu.Lock()
	defer f.mu.Unlock()
	return bytes.Clone(f.log)
}

func newTestStreamer(t *testing.T, f *fakeLogServer, notice io.Writer) *logStreamer {
	t.Helper()
	srv := httptest.NewServer(f)
	t.Cleanup(srv.Close)
	c, err := client.NewJobClient(srv.URL, "opj_test", client.WithRetryPolicy(client.RetryPolicy{MaxTries: 1}))
	if err != nil {
		t.Fatal(err)
	}
	return newLogStreamer(c, notice, streamerOptions{
		FlushEvery: 5 * time.Millisecond, FlushSize: 4 << 10, MaxChunk: 8 << 10,
		RetryMin: time.Millisecond, RetryMax: 20 * time.Millisecond, RequestTimeout: 5 * time.Second,
	})
}

// produce writes about total bytes of numbered lines in random-sized writes, as a CLI would.
func produce(w io.Writer, seed uint64, total int) []byte {
	rnd := rand.New(rand.NewPCG(seed, seed))
	var all bytes.Buffer
	for i := 0; all.Len() < total; i++ {
		var b bytes.Buffer
		for range rnd.IntN(40) + 1 {
			fmt.Fprintf(&b, "line %06d %s\n", i, bytes.Repeat([]byte{byte('a' + i%26)}, rnd.IntN(120)))
			i++
		}
		all.Write(b.Bytes())
		_, _ = w.Write(b.Bytes())
		if rnd.IntN(10) == 0 {
			time.Sleep(time.Millisecond)
		}
	}
	return all.Bytes()
}

func TestLogStreamerDeliversExactBytesThroughFaults(t *testing.T) {
	for _, tc := range []struct {
		name   string
		naive  bool
		strict bool
		base   string
	}{
		{name: "orchestrator offsets"},
		// A lost response followed by a resend gets 409 with the offset just past the chunk.
		{name: "strict offsets", strict: true},
		// A server whose offsets are positions in a log that already holds an earlier attempt's
		// bytes: the first answer is a 409 (or an acknowledgement of a "resend") pointing past them.
		{name: "log with earlier bytes", naive: true, base: "attempt 1 said hello\n"},
		{name: "log with many earlier bytes", naive: true, base: string(bytes.Repeat([]byte("attempt 1\n"), 10000))},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := &fakeLogServer{rnd: rand.New(rand.NewPCG(1, 2)), failBefore: 0.25, failAfter: 0.15, naive: tc.naive, strict: tc.strict,
				log: []byte(tc.base), base: int64(len(tc.base))}
			var notices lockedWriter
			notices.w = io.Discard
			s := newTestStreamer(t, f, &notices)
			start := time.Now()
			want := produce(s, 7, 600<<10)
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			st := s.Close(ctx)
			got := f.stored()
			if !bytes.Equal(got, append([]byte(tc.base), want...)) {
				t.Fatalf("server holds %d bytes, want %d; first difference at %d", len(got), len(tc.base)+len(want), firstDiff(got, append([]byte(tc.base), want...)))
			}
			if st.Produced != int64(len(want)) || st.Delivered != int64(len(want)) || st.Pending != 0 || st.Dropped != 0 {
				t.Fatalf("stats = %+v, want all %d bytes delivered", st, len(want))
			}
			if f.failures == 0 {
				t.Fatal("no faults were injected; the test proves nothing")
			}
			t.Logf("%d bytes in %s: %d requests, %d injected 503s, %d offset mismatches", len(want), time.Since(start).Round(time.Millisecond), f.requests, f.failures, f.mismatches)
		})
	}
}

func firstDiff(a, b []byte) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}

func TestLogStreamerStopsAtTruncation(t *testing.T) {
	f := &fakeLogServer{rnd: rand.New(rand.NewPCG(3, 4)), cap: 10 << 10}
	var notices bytes.Buffer
	s := newTestStreamer(t, f, &lockedWriter{w: &notices})
	want := produce(s, 9, 100<<10)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st := s.Close(ctx)
	if !st.Truncated || st.Produced != int64(len(want)) {
		t.Fatalf("stats = %+v, want truncated with everything produced", st)
	}
	got := f.stored()
	if !bytes.HasPrefix(got, want[:10<<10]) || !bytes.HasSuffix(got, []byte("[outpost: log truncated]\n")) {
		t.Fatalf("server log is not the first 10 KiB plus the marker (%d bytes)", len(got))
	}
	requests := f.requests
	_, _ = s.Write([]byte("after close\n"))
	if f.requests != requests || !bytes.Contains(notices.Bytes(), []byte("truncated")) {
		t.Fatalf("kept sending after truncation (%d → %d requests) or did not say so: %q", requests, f.requests, notices.String())
	}
}

func TestLogStreamerGivesUpOnPermanentErrorAndBoundsClose(t *testing.T) {
	t.Run("token refused", func(t *testing.T) {
		f := &fakeLogServer{rnd: rand.New(rand.NewPCG(5, 6)), status: http.StatusUnauthorized}
		s := newTestStreamer(t, f, io.Discard)
		_, _ = s.Write([]byte("hello\n"))
		st := s.Close(context.Background())
		if st.GaveUp == nil || f.requests != 1 {
			t.Fatalf("stats = %+v after %d requests, want one request and a permanent error", st, f.requests)
		}
	})
	t.Run("orchestrator down at the end", func(t *testing.T) {
		f := &fakeLogServer{rnd: rand.New(rand.NewPCG(5, 6)), failBefore: 1}
		s := newTestStreamer(t, f, io.Discard)
		_, _ = s.Write([]byte("hello\n"))
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		defer cancel()
		start := time.Now()
		st := s.Close(ctx)
		if d := time.Since(start); d > 2*time.Second {
			t.Fatalf("Close took %s, want it bounded by its context", d)
		}
		if st.Pending != 6 || st.Delivered != 0 || f.requests < 2 {
			t.Fatalf("stats = %+v after %d requests, want 6 bytes pending after retries", st, f.requests)
		}
	})
}

func TestLogStreamerDropsBeyondBufferWithMarker(t *testing.T) {
	f := &fakeLogServer{rnd: rand.New(rand.NewPCG(5, 6)), failBefore: 1}
	s := newTestStreamer(t, f, io.Discard)
	s.opt.MaxBuffer = 100
	_, _ = s.Write(bytes.Repeat([]byte("x"), 90))
	_, _ = s.Write(bytes.Repeat([]byte("y"), 50)) // does not fit: dropped
	f.mu.Lock()
	f.failBefore = 0
	f.mu.Unlock()
	time.Sleep(50 * time.Millisecond) // the buffer drains
	_, _ = s.Write([]byte("z\n"))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st := s.Close(ctx)
	want := string(bytes.Repeat([]byte("x"), 90)) + "\n[outpost: 50 bytes of log dropped while the orchestrator was unreachable]\nz\n"
	if got := string(f.stored()); got != want || st.Dropped != 50 {
		t.Fatalf("server log %q (dropped %d), want %q", got, st.Dropped, want)
	}
}

// buffered is how many bytes wait for delivery or for the answer to their append.
func (s *logStreamer) buffered() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.buf)
}

// The first bytes after a quiet spell (the job runner's first line, the CLI's first line of a
// phase) go out at once rather than at the next tick, a few times per tick; the rest waits for
// the tick, so a chatty CLI does not turn into a request per line.
func TestLogStreamerSendsFirstBytesPromptly(t *testing.T) {
	f := &fakeLogServer{rnd: rand.New(rand.NewPCG(5, 6))}
	srv := httptest.NewServer(f)
	t.Cleanup(srv.Close)
	c, err := client.NewJobClient(srv.URL, "opj_test", client.WithRetryPolicy(client.RetryPolicy{MaxTries: 1}))
	if err != nil {
		t.Fatal(err)
	}
	// No tick during the test: whatever arrives before Close was sent promptly.
	s := newLogStreamer(c, io.Discard, streamerOptions{FlushEvery: time.Hour, PromptSends: 3})
	var want []byte
	for i := range 3 {
		line := fmt.Appendf(nil, "line %d\n", i)
		want = append(want, line...)
		start := time.Now()
		_, _ = s.Write(line)
		// Delivered, and the answer taken in (the buffer empty again), so the next write finds
		// nothing waiting.
		for !bytes.Equal(f.stored(), want) || s.buffered() > 0 {
			if time.Since(start) > 5*time.Second {
				t.Fatalf("write %d: the orchestrator holds %q after 5 s, want %q (sent at the next tick, an hour away)", i, f.stored(), want)
			}
			time.Sleep(time.Millisecond)
		}
		t.Logf("line %d delivered after %s", i, time.Since(start).Round(time.Microsecond))
	}
	_, _ = s.Write([]byte("line 3\n"))
	time.Sleep(200 * time.Millisecond)
	if got := f.stored(); !bytes.Equal(got, want) {
		t.Fatalf("a fourth quiet write went out before the tick (%q): the prompt sends are not bounded", got)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if st := s.Close(ctx); st.Delivered != int64(len(want))+7 {
		t.Fatalf("stats %+v after Close, want every byte delivered", st)
	}
}
