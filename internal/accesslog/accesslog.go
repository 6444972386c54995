// Package accesslog records what an HTTP server answered, for its access log and its request
// metrics: the orchestrator's and the agent's state backend wrap every response in a Recorder.
package accesslog

import "net/http"

// Recorder is an http.ResponseWriter that remembers the status and the size of the response.
type Recorder struct {
	http.ResponseWriter
	// Status is the status written, http.StatusOK once a body is written without one, 0 before
	// anything is.
	Status int
	// Bytes counts the body bytes written.
	Bytes int64
}

// WriteHeader records the first status.
func (r *Recorder) WriteHeader(code int) {
	if r.Status == 0 {
		r.Status = code
	}
	r.ResponseWriter.WriteHeader(code)
}

// Write counts the body's bytes.
func (r *Recorder) Write(b []byte) (int, error) {
	if r.Status == 0 {
		r.Status = http.StatusOK
	}
	n, err := r.ResponseWriter.Write(b)
	r.Bytes += int64(n)
	return n, err
}

// Unwrap lets http.ResponseController reach the connection's writer (flushes, deadlines).
func (r *Recorder) Unwrap() http.ResponseWriter { return r.ResponseWriter }
