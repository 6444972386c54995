package jobrun

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"time"

	"github.com/outpost-dev/terraform-provider-outpost/internal/api"
	"github.com/outpost-dev/terraform-provider-outpost/internal/retry"
)

// logAppender is the part of client.JobClient the streamer needs; tests may stand in for it.
type logAppender interface {
	AppendLog(ctx context.Context, offset int64, data []byte) (*api.LogAppendResponse, error)
}

// streamerOptions tune a logStreamer; zero fields take the defaults below.
type streamerOptions struct {
	// FlushEvery is how long produced bytes may wait before they are sent.
	FlushEvery time.Duration
	// FlushSize sends early once this many bytes are buffered.
	FlushSize int
	// PromptSends is how many times per FlushEvery bytes written while nothing waits go out at
	// once instead of at the next tick: the job runner's first lines and the CLI's first line
	// of a phase reach the orchestrator within a request's time, while a chatty CLI still costs
	// at most PromptSends+1 requests per FlushEvery (plus what a send in flight leaves behind).
	PromptSends int
	// MaxChunk bounds one append; the orchestrator refuses bodies over 1 MiB.
	MaxChunk int
	// MaxBuffer bounds memory while the orchestrator is unreachable; bytes beyond it are dropped
	// and replaced by a marker line. The orchestrator keeps at most 16 MiB per deployment anyway.
	MaxBuffer int
	// RetryMin and RetryMax are the first and the largest backoff ceiling after a transient
	// error (retry.Backoff).
	RetryMin, RetryMax time.Duration
	// RequestTimeout bounds one append, so a hung connection cannot stall the log.
	RequestTimeout time.Duration
	// OnStop is called (once, on its own goroutine) when an answer says the attempt should stop:
	// a cancel was requested, or the run was superseded by a newer attempt (stale fencing).
	// Log appends double as a cancel check between the agent's polls.
	OnStop func(reason string)
}

func (o *streamerOptions) defaults() {
	if o.FlushEvery <= 0 {
		o.FlushEvery = time.Second
	}
	if o.FlushSize <= 0 {
		o.FlushSize = 64 << 10
	}
	if o.PromptSends <= 0 {
		o.PromptSends = 4
	}
	if o.MaxChunk <= 0 {
		o.MaxChunk = 256 << 10
	}
	if o.MaxBuffer <= 0 {
		o.MaxBuffer = 32 << 20
	}
	if o.RetryMin <= 0 {
		o.RetryMin = 500 * time.Millisecond
	}
	if o.RetryMax <= 0 {
		o.RetryMax = 10 * time.Second
	}
	if o.RequestTimeout <= 0 {
		o.RequestTimeout = 30 * time.Second
	}
}

// logStats summarises what happened to the log, printed to stdout at the end.
type logStats struct {
	Produced  int64 // bytes written to the streamer
	Delivered int64 // of those, bytes the orchestrator acknowledged
	Dropped   int64 // bytes dropped because the buffer was full
	Truncated bool  // the orchestrator reached its cap
	GaveUp    error // a permanent error stopped delivery
	Pending   int   // bytes still buffered when Close returned
}

// logStreamer sends the attempt's log to the orchestrator by byte offset while the CLI runs.
//
// Writes never block on the network: they land in a buffer that a background loop sends every
// FlushEvery, or sooner once FlushSize bytes wait, and at once (PromptSends times a tick) for
// bytes written when nothing waited, so a line after a quiet spell is not held back by the
// tick. The protocol is offset based, so delivery is exact even over retries:
//   - After a transient error (network, 5xx, 429) the same chunk is sent again at the same
//     offset, with backoff, while new output keeps buffering. The orchestrator acknowledges a
//     resend of bytes it already holds, so a lost response does not duplicate them.
//   - A 409 offset_mismatch carries the committed offset. Once the streamer knows the log is its
//     own, a committed offset inside the chunk means part of it arrived, and it resumes from
//     there. Before its first definitive answer a different offset means the log already held
//     bytes (an earlier attempt of the deployment), and the streamer appends after them.
//   - When the orchestrator reports truncated, sending stops; the CLI keeps running and the full
//     log remains in the container's stdout.
//   - An error no retry can cure (retry.WhileTokenHolds: the token refused, the deployment gone)
//     stops delivery the same way.
type logStreamer struct {
	api    logAppender
	opt    streamerOptions
	notice io.Writer // operational messages, stdout only (never sent to the orchestrator)

	mu          sync.Mutex
	buf         []byte // produced bytes not yet known to be committed; buf[0] goes at offset
	offset      int64
	retryN      int  // while > 0, the size of the chunk whose delivery is uncertain
	synced      bool // a definitive answer told us where our bytes go
	dropped     int64
	dropPending int64 // dropped bytes not yet announced by a marker line
	stats       logStats
	stopped     bool
	stopAsked   bool
	// prompt counts the sends kicked by a write into an empty buffer since the last tick.
	prompt int

	kick    chan struct{}
	closing chan struct{}
	done    chan struct{}
	ctx     context.Context
	abort   context.CancelFunc
	once    sync.Once
}

// newLogStreamer starts the send loop. Call Close to deliver the rest and stop it.
func newLogStreamer(a logAppender, notice io.Writer, opt streamerOptions) *logStreamer {
	opt.defaults()
	ctx, cancel := context.WithCancel(context.Background())
	s := &logStreamer{
		api: a, opt: opt, notice: notice,
		kick: make(chan struct{}, 1), closing: make(chan struct{}), done: make(chan struct{}),
		ctx: ctx, abort: cancel,
	}
	go s.loop()
	return s
}

// Write buffers p for delivery. It never fails and never blocks on the network.
func (s *logStreamer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.stats.Produced += int64(len(p))
	if s.stopped {
		return len(p), nil
	}
	if len(s.buf)+len(p) > s.opt.MaxBuffer {
		s.dropped += int64(len(p))
		s.dropPending += int64(len(p))
		return len(p), nil
	}
	if s.dropPending > 0 {
		s.buf = fmt.Appendf(s.buf, "\n[outpost: %d bytes of log dropped while the orchestrator was unreachable]\n", s.dropPending)
		s.dropPending = 0
	}
	idle := len(s.buf) == 0
	s.buf = append(s.buf, p...)
	switch {
	case len(s.buf) >= s.opt.FlushSize:
		s.kickLoop()
	case idle && s.prompt < s.opt.PromptSends:
		// Nothing was waiting, so nothing is being batched: send now rather than up to
		// FlushEvery later (measured in BenchmarkCLIStart: the CLI's first line reached the
		// orchestrator 71 ms after the CLI wrote it, p50 of 10 plans, with a 1 s tick).
		s.prompt++
		s.kickLoop()
	}
	return len(p), nil
}

// kickLoop wakes the send loop. Callers hold mu.
func (s *logStreamer) kickLoop() {
	select {
	case s.kick <- struct{}{}:
	default:
	}
}

// Close delivers what is buffered and stops the loop. ctx bounds the wait; when it ends, the
// undelivered rest is given up (it is still in stdout). Close is safe to call more than once.
func (s *logStreamer) Close(ctx context.Context) logStats {
	s.once.Do(func() { close(s.closing) })
	select {
	case <-s.done:
	case <-ctx.Done():
		s.abort()
		<-s.done
	}
	s.abort()
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.stats
	st.Dropped = s.dropped
	st.Pending = len(s.buf)
	return st
}

func (s *logStreamer) loop() {
	defer close(s.done)
	ticker := time.NewTicker(s.opt.FlushEvery)
	defer ticker.Stop()
	back := retry.Backoff{Base: s.opt.RetryMin, Max: s.opt.RetryMax}
	for {
		closing := false
		select {
		case <-ticker.C:
			s.mu.Lock()
			s.prompt = 0
			s.mu.Unlock()
		case <-s.kick:
		case <-s.closing:
			closing = true
		case <-s.ctx.Done():
			return
		}
		for {
			more, err := s.sendOnce()
			if err != nil {
				if s.ctx.Err() != nil {
					return
				}
				if back.Failures() == 0 {
					fmt.Fprintf(s.notice, "[outpost: cannot deliver the log to the orchestrator yet (%s); retrying]\n", oneLine(err))
				}
				if !s.sleep(back.Next(api.RetryAfter(err))) {
					return
				}
				continue
			}
			if n := back.Failures(); n > 0 {
				fmt.Fprintf(s.notice, "[outpost: log delivery resumed after %d failed tries]\n", n)
				back.Reset()
			}
			if !more {
				break
			}
		}
		if closing || s.isClosing() {
			if s.idle() {
				return
			}
		}
	}
}

func (s *logStreamer) isClosing() bool { return isClosed(s.closing) }

// idle reports whether nothing is left to send; on closing it also emits a pending drop marker.
func (s *logStreamer) idle() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.stopped && s.dropPending > 0 {
		s.buf = fmt.Appendf(s.buf, "\n[outpost: %d bytes of log dropped while the orchestrator was unreachable]\n", s.dropPending)
		s.dropPending = 0
		return false
	}
	return s.stopped || len(s.buf) == 0
}

func (s *logStreamer) sleep(d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-s.ctx.Done():
		return false
	}
}

// sendOnce sends one chunk. more is true when buffered bytes remain to be sent right away.
func (s *logStreamer) sendOnce() (more bool, err error) {
	s.mu.Lock()
	if s.stopped || len(s.buf) == 0 {
		s.mu.Unlock()
		return false, nil
	}
	n := s.retryN
	if n == 0 || n > len(s.buf) {
		n = min(len(s.buf), s.opt.MaxChunk)
	}
	off := s.offset
	chunk := bytes.Clone(s.buf[:n])
	s.mu.Unlock()

	ctx, cancel := context.WithTimeout(s.ctx, s.opt.RequestTimeout)
	resp, err := s.api.AppendLog(ctx, off, chunk)
	cancel()

	s.mu.Lock()
	defer s.mu.Unlock()
	var apiErr *api.Error
	switch {
	case err == nil:
		s.reconcile(off, n, resp.CommittedOffset, true)
		if resp.CancelRequested {
			s.askStop("a cancel of this deployment was requested")
		}
		if resp.Truncated {
			s.stop()
			s.stats.Truncated = true
			fmt.Fprintf(s.notice, "[outpost: the orchestrator truncated this deployment's log at its size cap; the rest is only in this output]\n")
			return false, nil
		}
	case errors.Is(err, api.ErrOffsetMismatch) && errors.As(err, &apiErr) && apiErr.CommittedOffset != nil:
		s.reconcile(off, n, *apiErr.CommittedOffset, false)
	case !retry.WhileTokenHolds(err):
		if errors.Is(err, api.ErrStaleFencing) {
			s.askStop("the orchestrator handed this deployment to a newer attempt")
		}
		s.stop()
		s.stats.GaveUp = err
		fmt.Fprintf(s.notice, "[outpost: stopped sending the log to the orchestrator: %s]\n", oneLine(err))
		return false, nil
	default:
		s.retryN = n
		return false, err
	}
	// Send the rest right away, unless the answer moved nothing (a server acknowledging without
	// taking the bytes): then wait for the next tick instead of spinning.
	return len(s.buf) > 0 && s.offset != off, nil
}

// reconcile moves the window after a definitive answer: committed is the orchestrator's log
// size, accepted says whether the append was acknowledged (true) or refused with 409 (false).
// Callers hold mu.
func (s *logStreamer) reconcile(off int64, n int, committed int64, accepted bool) {
	ours := accepted || s.synced
	s.synced = true
	s.retryN = 0
	end := off + int64(n)
	switch {
	case committed < off:
		// The orchestrator holds less than it acknowledged before; those bytes are gone and we
		// no longer have them. Say so instead of leaving a silent hole.
		lost := off - committed
		s.buf = append(fmt.Appendf(nil, "\n[outpost: %d bytes of log were lost by the orchestrator]\n", lost), s.buf...)
		s.offset = committed
	case committed <= end && ours:
		k := int(committed - off)
		s.buf = s.buf[k:]
		s.offset = committed
		s.stats.Delivered += int64(k)
	default:
		// Bytes we did not write precede ours (an earlier attempt's log): append after them.
		s.offset = committed
	}
	if len(s.buf) == 0 {
		s.buf = nil // let a large buffer be collected
	}
}

// askStop tells OnStop once. Callers hold mu.
func (s *logStreamer) askStop(reason string) {
	if s.stopAsked || s.opt.OnStop == nil {
		return
	}
	s.stopAsked = true
	go s.opt.OnStop(reason)
}

// stop ends delivery and frees the buffer. Callers hold mu.
func (s *logStreamer) stop() {
	s.stopped = true
	s.buf = nil
	s.retryN = 0
}

// oneLine keeps a notice on one line: joined errors carry newlines.
func oneLine(err error) string {
	return strings.ReplaceAll(err.Error(), "\n", "; ")
}

// lockedWriter serialises writes from the CLI's output, the job runner and the streamer's notices.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// teeWriter copies the log to stdout and the streamer. A failing stdout must not stop delivery
// to the orchestrator, so its errors are ignored.
type teeWriter struct {
	console io.Writer
	stream  io.Writer
}

func (t teeWriter) Write(p []byte) (int, error) {
	_, _ = t.console.Write(p)
	return t.stream.Write(p)
}
