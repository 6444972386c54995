package statebackend

// Reading, writing and deleting a state: the GET, POST and DELETE the CLI's http backend sends,
// streamed to and from the state store.

import (
	"bytes"
	"crypto/md5"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strconv"

	"github.com/outpost-dev/terraform-provider-outpost/agent/internal/statestore"
)

// get streams the state to the client. The headers go out once the state's first chunk has been
// checked; damage found later breaks the response (the client sees fewer bytes than its
// Content-Length), so a CLI never takes a wrong state for a complete one.
func (h *Handler) get(w http.ResponseWriter, r *http.Request, key string) {
	opened := false
	_, err := h.store.Stream(r.Context(), key, 0, func(gen statestore.Generation) io.Writer {
		opened = true
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Content-Length", strconv.FormatInt(gen.Size, 10))
		w.Header().Set("ETag", `"`+gen.SHA256+`"`)
		w.Header().Set("X-Outpost-State-Generation", strconv.FormatInt(gen.Generation, 10))
		w.WriteHeader(http.StatusOK)
		return w
	})
	switch {
	case err == nil:
	case opened:
		if r.Context().Err() == nil {
			h.log.LogAttrs(r.Context(), slog.LevelError, "state read failed after the response began; aborting it", slog.String("state_key", key), slog.Any("err", err))
		}
		panic(http.ErrAbortHandler)
	case errors.Is(err, statestore.ErrNotFound):
		w.WriteHeader(http.StatusNoContent)
	default:
		h.storeError(w, r, key, "", "read", err)
	}
}

// errChecksum is a body that does not match its Content-MD5.
var errChecksum = errors.New("the body does not match its Content-MD5 header (damaged in transit?); nothing was written")

// put streams the body into the store (see statestore.Store.WriteFrom): nothing is committed
// unless the whole body arrived, is a state, fits the limit and matches its Content-MD5.
func (h *Handler) put(w http.ResponseWriter, r *http.Request, key, holder string) {
	limit := h.limits.l.MaxBodyBytes
	if r.ContentLength > limit {
		writeError(w, http.StatusRequestEntityTooLarge, "too_large", fmt.Sprintf("body of %d bytes exceeds the limit of %d bytes", r.ContentLength, limit))
		return
	}
	var body io.Reader = &bodyReader{r: http.MaxBytesReader(w, r.Body, limit)}
	opts := statestore.WriteOptions{LockID: r.URL.Query().Get("ID"), Holder: holder, Writer: holder}
	if sum := r.Header.Get("Content-MD5"); sum != "" {
		want, err := base64.StdEncoding.DecodeString(sum)
		if err != nil {
			writeError(w, http.StatusBadRequest, "checksum_mismatch", "the Content-MD5 header is not base64")
			return
		}
		hash := md5.New()
		body = io.TeeReader(body, hash)
		opts.Verify = func() error {
			if !bytes.Equal(want, hash.Sum(nil)) {
				return errChecksum
			}
			return nil
		}
	}
	gen, err := h.store.WriteFrom(r.Context(), key, body, opts)
	var mbe *http.MaxBytesError
	var be *bodyError
	switch {
	case err == nil:
		writeJSON(w, http.StatusOK, map[string]any{"generation": gen.Generation, "sha256": gen.SHA256, "size": gen.Size})
	case errors.As(err, &mbe):
		writeError(w, http.StatusRequestEntityTooLarge, "too_large", fmt.Sprintf("body exceeds the limit of %d bytes; nothing was written", limit))
	case errors.Is(err, errChecksum):
		writeError(w, http.StatusBadRequest, "checksum_mismatch", err.Error())
	case errors.As(err, &be):
		writeError(w, http.StatusBadRequest, "bad_body", "could not read the request body: "+be.err.Error())
	default:
		h.storeError(w, r, key, holder, "write", err)
	}
}

// bodyReader marks errors of reading the request body, so they are not taken for the store's.
type bodyReader struct{ r io.Reader }

func (b *bodyReader) Read(p []byte) (int, error) {
	n, err := b.r.Read(p)
	if err != nil && err != io.EOF {
		return n, &bodyError{err}
	}
	return n, err
}

type bodyError struct{ err error }

func (e *bodyError) Error() string { return "request body: " + e.err.Error() }
func (e *bodyError) Unwrap() error { return e.err }

func (h *Handler) delete(w http.ResponseWriter, r *http.Request, key, holder string) {
	err := h.store.Delete(r.Context(), key)
	if err != nil && !errors.Is(err, statestore.ErrNotFound) {
		h.storeError(w, r, key, holder, "delete", err)
		return
	}
	h.stopRenewal(key, "")
	writeJSON(w, http.StatusOK, map[string]any{"deleted": key})
}

// readLockBody reads a LOCK or UNLOCK body, at most maxLockBodyBytes; it answers 413 (and
// returns false) when the body is larger.
func (h *Handler) readLockBody(w http.ResponseWriter, r *http.Request) ([]byte, bool) {
	const limit = maxLockBodyBytes
	if r.ContentLength > limit {
		writeError(w, http.StatusRequestEntityTooLarge, "too_large", fmt.Sprintf("body of %d bytes exceeds the limit of %d bytes", r.ContentLength, limit))
		return nil, false
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, limit))
	var mbe *http.MaxBytesError
	if errors.As(err, &mbe) {
		writeError(w, http.StatusRequestEntityTooLarge, "too_large", fmt.Sprintf("body exceeds the limit of %d bytes", limit))
		return nil, false
	}
	if err != nil {
		writeError(w, http.StatusBadRequest, "bad_body", "could not read the request body: "+err.Error())
		return nil, false
	}
	return body, true
}

// storeError maps store errors to the statuses the CLIs understand. Lock conflicts answer with
// the current lock info JSON (what the CLIs parse), its ID hidden from other holders; everything
// else with a JSON error body.
func (h *Handler) storeError(w http.ResponseWriter, r *http.Request, key, holder, op string, err error) {
	var locked *statestore.LockedError
	var mismatch *statestore.LockMismatchError
	switch {
	case errors.As(err, &locked):
		writeJSON(w, http.StatusLocked, shownTo(locked.Lock, holder))
	case errors.As(err, &mismatch):
		if mismatch.Lock != nil {
			writeJSON(w, http.StatusConflict, shownTo(*mismatch.Lock, holder))
		} else {
			writeError(w, http.StatusConflict, "lock_lost", err.Error())
		}
	case errors.Is(err, statestore.ErrInvalidState):
		writeError(w, http.StatusBadRequest, "invalid_state", err.Error())
	case errors.Is(err, statestore.ErrInvalidKey):
		writeError(w, http.StatusBadRequest, "invalid_key", err.Error())
	case errors.Is(err, statestore.ErrTooLarge):
		writeError(w, http.StatusRequestEntityTooLarge, "too_large", err.Error())
	case errors.Is(err, statestore.ErrConflict):
		writeError(w, http.StatusConflict, "conflict", err.Error())
	case errors.Is(err, statestore.ErrCorrupt), errors.Is(err, statestore.ErrEncryption), errors.Is(err, statestore.ErrKeyCollision):
		h.log.LogAttrs(r.Context(), slog.LevelError, "state "+op+" failed", slog.String("state_key", key), slog.Any("err", err))
		writeError(w, http.StatusInternalServerError, "state_unreadable", err.Error())
	case r.Context().Err() != nil:
		// The client went away; nobody reads this answer.
		writeError(w, http.StatusServiceUnavailable, "canceled", "request canceled")
	default:
		h.log.LogAttrs(r.Context(), slog.LevelError, "state "+op+" failed", slog.String("state_key", key), slog.Any("err", err))
		writeError(w, http.StatusServiceUnavailable, "storage_unavailable", err.Error())
	}
}
