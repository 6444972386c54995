package jobrun

import (
	"bytes"
	"io"
	"slices"
	"sync"
)

// redactedMark replaces every secret found in the log.
const redactedMark = "[redacted]"

// minSecretLen keeps short, common strings (a git user name like "git") from being treated as
// secrets, which would blank out ordinary words all over the log.
const minSecretLen = 6

// redactor replaces known secrets (the job token, its Basic-auth form, git URL credentials) in
// everything written to the log before the bytes reach stdout or the orchestrator. The job token
// is never printed on purpose; this is the belt-and-braces layer for the accidental cases, such
// as TF_LOG=trace printing request headers, or a user's local-exec echoing its environment.
//
// A secret can be split across two writes, so the redactor holds back the shortest tail that
// could still be the start of a secret and joins it to the next write. Only such a tail is held
// back, so ordinary output is not delayed.
type redactor struct {
	mu      sync.Mutex
	w       io.Writer
	secrets [][]byte
	pending []byte
}

// newRedactor wraps w. Secrets shorter than minSecretLen are ignored.
func newRedactor(w io.Writer, secrets ...string) *redactor {
	r := &redactor{w: w}
	r.add(secrets...)
	return r
}

// add registers more secrets, for example credentials found in a git URL.
func (r *redactor) add(secrets ...string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, s := range secrets {
		if len(s) >= minSecretLen && !slices.ContainsFunc(r.secrets, func(b []byte) bool { return string(b) == s }) {
			r.secrets = append(r.secrets, []byte(s))
		}
	}
	// Longest first: a form inside a longer one (the token inside its Basic-auth pair's JSON
	// escaping, say) must not break the longer one up before it is matched.
	slices.SortStableFunc(r.secrets, func(a, b []byte) int { return len(b) - len(a) })
}

// Write redacts and forwards p, except a tail that might begin a secret. It always reports
// len(p) on success, because the caller wrote all of p even when some of it is held back.
func (r *redactor) Write(p []byte) (int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	data := append(r.pending, p...)
	r.pending = nil
	for _, s := range r.secrets {
		data = bytes.ReplaceAll(data, s, []byte(redactedMark))
	}
	hold := r.holdBack(data)
	if hold > 0 {
		r.pending = bytes.Clone(data[len(data)-hold:])
		data = data[:len(data)-hold]
	}
	if len(data) > 0 {
		if _, err := r.w.Write(data); err != nil {
			return 0, err
		}
	}
	return len(p), nil
}

// holdBack is the length of the longest suffix of data that is a proper prefix of a secret.
func (r *redactor) holdBack(data []byte) int {
	best := 0
	for _, s := range r.secrets {
		longest := min(len(s)-1, len(data))
		for n := longest; n > best; n-- {
			if bytes.Equal(data[len(data)-n:], s[:n]) {
				best = n
				break
			}
		}
	}
	return best
}

// Flush writes the held-back tail; at the end of the log it cannot be a secret any more.
func (r *redactor) Flush() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.pending) == 0 {
		return nil
	}
	data := r.pending
	r.pending = nil
	_, err := r.w.Write(data)
	return err
}
