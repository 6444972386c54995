package console

import (
	"bytes"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/outpost-dev/terraform-provider-outpost/internal/api"
)

// The live parts are server-sent event streams that read the store every PollInterval and send
// what changed: a rendered fragment for htmx's SSE extension to swap (runners, the deployments
// list, a deployment's summary), or the next piece of a log for console.js. Between reads a stream
// holds nothing of the database, and any replica serves any stream since all of it is in the
// store. A stream ends after maxStream (the browser reconnects; a log resumes at its offset from
// Last-Event-ID), when the browser goes away, or when the server shuts down.

// logChunk is the most log bytes one event carries.
const logChunk = 64 << 10

// sse writes events to one stream.
type sse struct {
	w  http.ResponseWriter
	rc *http.ResponseController
}

func (c *Console) startSSE(w http.ResponseWriter) *sse {
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	s := &sse{w: w, rc: http.NewResponseController(w)}
	// A reconnect after the server ends a stream comes at once.
	_ = s.send("retry: 1000\n\n")
	return s
}

// event sends one event; data may span lines.
func (s *sse) event(id, name, data string) error {
	var b strings.Builder
	if id != "" {
		b.WriteString("id: " + id + "\n")
	}
	b.WriteString("event: " + name + "\n")
	// A carriage return ends a line in an event stream as a newline does: as one, a CLI's
	// progress line cannot end the data and start a field of its own.
	data = strings.ReplaceAll(strings.ReplaceAll(data, "\r\n", "\n"), "\r", "\n")
	for _, line := range strings.Split(data, "\n") {
		b.WriteString("data: " + line + "\n")
	}
	b.WriteString("\n")
	return s.send(b.String())
}

func (s *sse) send(raw string) error {
	// Every write gets its own deadline, so a stream is not cut by the server's write timeout
	// meant for single answers, yet a browser that stops reading is given up.
	_ = s.rc.SetWriteDeadline(time.Now().Add(30 * time.Second))
	if _, err := s.w.Write([]byte(raw)); err != nil {
		return err
	}
	return s.rc.Flush()
}

// loop calls step now and then every PollInterval until step says done, the stream is over
// maxStream, the browser goes away or the server closes.
func (c *Console) loop(r *http.Request, step func() (done bool, err error)) error {
	t := time.NewTicker(c.cfg.PollInterval)
	defer t.Stop()
	end := time.NewTimer(maxStream)
	defer end.Stop()
	for {
		done, err := step()
		if err != nil || done {
			return err
		}
		select {
		case <-r.Context().Done():
			return nil
		case <-c.cfg.Closing:
			return nil
		case <-end.C:
			return nil
		case <-t.C:
		}
	}
}

// fragmentStream sends the fragment render makes as event name whenever it changed. When render
// says the fragment is final (a deployment that ended) it sends "done" and ends the stream: the
// page's sse-close="done" closes the browser's side, which would otherwise reconnect.
func (c *Console) fragmentStream(w http.ResponseWriter, r *http.Request, name string, render func() (string, bool, error)) error {
	s := c.startSSE(w)
	last := ""
	return c.loop(r, func() (bool, error) {
		html, final, err := render()
		if err != nil {
			return true, err
		}
		if html != last {
			if err := s.event("", name, html); err != nil {
				return true, nil //nolint:nilerr // the browser went away
			}
			last = html
		}
		if final {
			_ = s.event("", "done", "")
		}
		return final, nil
	})
}

func (c *Console) runnersLive(w http.ResponseWriter, r *http.Request, v *visit) error {
	return c.fragmentStream(w, r, "runners", func() (string, bool, error) {
		body, err := c.runnersBody(r.Context(), v.org)
		if err != nil {
			return "", true, err
		}
		html, err := c.fragment("runners", "runner-rows", body)
		return html, false, err
	})
}

func (c *Console) deploymentsLive(w http.ResponseWriter, r *http.Request, v *visit) error {
	f := parseFilter(r.URL.Query())
	return c.fragmentStream(w, r, "rows", func() (string, bool, error) {
		body, err := c.deploymentsBody(r.Context(), v.org, f)
		if err != nil {
			return "", true, err
		}
		html, err := c.fragment("deployments", "deployment-rows", body)
		return html, false, err
	})
}

func (c *Console) deploymentLive(w http.ResponseWriter, r *http.Request, v *visit) error {
	id := r.PathValue("id")
	if _, err := c.deploymentBody(r.Context(), v, id); err != nil {
		return err // before the stream starts: a plain refusal
	}
	return c.fragmentStream(w, r, "summary", func() (string, bool, error) {
		body, err := c.deploymentBody(r.Context(), v, id)
		if err != nil {
			return "", true, err
		}
		html, err := c.fragment("deployment", "deployment-summary", body)
		// Outputs arrive just before the finished event; one more read after the end is not
		// needed, as both are written before the status turns terminal.
		return html, body.D.Status.Terminal(), err
	})
}

// logStream sends a deployment's log from the offset the browser has (Last-Event-ID on a
// reconnect, else ?offset=), as events "log" whose id is the offset after them and whose data is
// the text as HTML, then "end" once the deployment ended and the whole log was sent. Events end
// at a line's end where they can, so a colour sequence or a character is not cut in two.
func (c *Console) logStream(w http.ResponseWriter, r *http.Request, v *visit) error {
	id := r.PathValue("id")
	if api.ValidateID("id", id) != nil {
		return errNotFound
	}
	from := r.Header.Get("Last-Event-ID")
	if from == "" {
		from = r.URL.Query().Get("offset")
	}
	offset, err := strconv.ParseInt(from, 10, 64)
	if err != nil || offset < 0 {
		offset = 0
	}
	// The first read refuses an unknown deployment or an offset beyond the log before the
	// stream starts.
	first, err := c.cfg.Store.ReadLogs(r.Context(), v.org, id, offset, logChunk)
	if err != nil {
		return err
	}
	s := c.startSSE(w)
	return c.loop(r, func() (bool, error) {
		for {
			chunk := first
			first = nil
			if chunk == nil {
				var err error
				if chunk, err = c.cfg.Store.ReadLogs(r.Context(), v.org, id, offset, logChunk); err != nil {
					return true, err
				}
			}
			data := chunk.Data
			if !chunk.Complete && len(data) > 0 {
				data = wholeLines(data, len(data) == logChunk)
			}
			if len(data) > 0 {
				offset += int64(len(data))
				if err := s.event(strconv.FormatInt(offset, 10), "log", ansiHTML(string(data))); err != nil {
					return true, nil //nolint:nilerr // the browser went away
				}
			}
			if chunk.Complete && offset == chunk.NextOffset {
				if err := s.event(strconv.FormatInt(offset, 10), "end", fmt.Sprintf("%d bytes", offset)); err != nil {
					return true, nil //nolint:nilerr // the browser went away
				}
				return true, nil
			}
			if len(data) < logChunk/2 {
				return false, nil // caught up: wait for more
			}
		}
	})
}

// wholeLines is data up to its last newline; with full (the read was cut at its limit and the
// line is longer than a chunk) it is data up to its last whole UTF-8 character instead.
func wholeLines(data []byte, full bool) []byte {
	if i := bytes.LastIndexByte(data, '\n'); i >= 0 {
		return data[:i+1]
	}
	if !full {
		return nil
	}
	end := len(data)
	for end > 0 && end > len(data)-utf8.UTFMax && !utf8.Valid(data[:end]) {
		end--
	}
	return data[:end]
}
