package statebackend

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"

	"github.com/outpost-dev/terraform-provider-outpost/agent/internal/statestore"
)

// The LOCK and UNLOCK requests of the http backend, and what a caller may see of a lock.

func (h *Handler) lock(w http.ResponseWriter, r *http.Request, key, holder string) {
	body, ok := h.readLockBody(w, r)
	if !ok {
		return
	}
	var info statestore.LockInfo
	if err := json.Unmarshal(body, &info); err != nil || info.ID == "" {
		writeError(w, http.StatusBadRequest, "invalid_lock_info", "LOCK needs the lock info JSON with an ID")
		return
	}
	info.Holder = holder
	if err := h.store.Lock(r.Context(), key, info); err != nil {
		h.storeError(w, r, key, holder, "lock", err)
		return
	}
	h.startRenewal(key, info.ID, holder)
	writeJSON(w, http.StatusOK, info)
}

func (h *Handler) unlock(w http.ResponseWriter, r *http.Request, key, holder string) {
	body, ok := h.readLockBody(w, r)
	if !ok {
		return
	}
	var info statestore.LockInfo
	if len(bytes.TrimSpace(body)) > 0 {
		if err := json.Unmarshal(body, &info); err != nil {
			writeError(w, http.StatusBadRequest, "invalid_lock_info", "UNLOCK needs the lock info JSON (or an empty body to force-unlock)")
			return
		}
	}
	if info.ID == "" {
		h.log.LogAttrs(r.Context(), slog.LevelWarn, "force-unlock over HTTP refused", slog.String("state_key", key), slog.String("by", holder))
		writeError(w, http.StatusForbidden, "force_unlock_refused", fmt.Sprintf("job runners cannot force-unlock state %q; an operator runs `outpost-agent state force-unlock %s` in the cluster", key, key))
		return
	}
	err := h.store.Unlock(r.Context(), key, info.ID, holder)
	if err == nil {
		h.stopRenewal(key, info.ID)
	}
	if err != nil && !errors.Is(err, statestore.ErrNotLocked) {
		h.storeError(w, r, key, holder, "unlock", err)
		return
	}
	w.WriteHeader(http.StatusOK)
}

// HiddenLockIDPrefix starts what stands for the ID of another holder's lock in 409 and 423
// answers: the ID is what lets a write or an unlock through, so only the lock's own holder sees
// it. The CLIs print it as the lock's ID, so it says who holds the lock and what to do.
const HiddenLockIDPrefix = "hidden"

// shownTo is a lock's info as the caller may see it.
func shownTo(l statestore.HeldLock, holder string) statestore.LockInfo {
	info := l.Info
	if holder == "" || info.Holder != holder {
		info.ID = fmt.Sprintf("%s (held by %s; an operator releases a stuck lock with `outpost-agent state force-unlock`)", HiddenLockIDPrefix, info.Holder)
	}
	return info
}
