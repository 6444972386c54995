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

// The LOCK and UNLOCK requests of the http backend, and what a caller may see of a lock; how
// the locks taken are kept alive is in renewals.go.

// lock takes the state lock for holder. A plan (readOnly) gets its lock info echoed and takes
// nothing: it never writes, and the state it reads is one whole generation, so a lock would
// protect nothing and only let untrusted plan code hold the applies off.
func (h *Handler) lock(w http.ResponseWriter, r *http.Request, key, holder string, readOnly bool) {
	body, ok := h.readLockBody(w, r)
	if !ok {
		return
	}
	var info statestore.LockInfo
	if err := json.Unmarshal(body, &info); err != nil || info.ID == "" {
		writeError(w, http.StatusBadRequest, "invalid_lock_info", "LOCK needs the lock info JSON with an ID")
		return
	}
	if readOnly {
		writeJSON(w, http.StatusOK, info)
		return
	}
	info.Holder, info.Pod, info.Runner = holder, h.holderPod(r.Context(), holder), h.runner
	if err := h.store.Lock(r.Context(), key, info); err != nil {
		h.storeError(w, r, key, holder, "lock", err)
		return
	}
	h.startRenewal(key, info.ID, holder)
	writeJSON(w, http.StatusOK, info)
}

// unlock releases holder's lock. A plan (readOnly) holds none: its unlock is answered 200, or
// 409 when it names the ID of the lock someone else holds (as anyone's would be), so no CLI
// reports a lock released that is not; a lock the plan itself took through an earlier agent is
// released.
func (h *Handler) unlock(w http.ResponseWriter, r *http.Request, key, holder string, readOnly bool) {
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
	var err error
	release := !readOnly
	if readOnly {
		var held *statestore.HeldLock
		switch held, err = h.store.LockInfo(r.Context(), key); {
		case err != nil || held == nil || held.Info.ID != info.ID:
		case held.Info.Holder == holder:
			// The plan's own lock, taken through an agent of an earlier release, which locked
			// for plans too (a plan that outlived a `helm upgrade`): its own to release.
			release = true
		default:
			err = &statestore.LockMismatchError{Key: key, LockID: info.ID, Lock: held}
		}
	}
	if release {
		if err = h.store.Unlock(r.Context(), key, info.ID, holder); err == nil {
			h.stopRenewal(key, info.ID)
		}
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

// shownTo is a lock's info as the caller may see it: all of it to the lock's own holder; to
// anyone else what the agent itself vouches for (the holder, a known operation, when it was
// taken) and none of the free text the holder's CLI sent (Who, Info, Path, Version), which
// untrusted deployment code chooses and another job's log would otherwise print.
func shownTo(l statestore.HeldLock, holder string) statestore.LockInfo {
	info := l.Info
	if holder != "" && info.Holder == holder {
		return info
	}
	op := knownOperation(info.Operation)
	return statestore.LockInfo{
		ID:        fmt.Sprintf("%s (held by %s; an operator releases a stuck lock with `outpost-agent state force-unlock`)", HiddenLockIDPrefix, info.Holder),
		Operation: op,
		Who:       info.Holder,
		Created:   info.Created,
		Holder:    info.Holder,
	}
}
