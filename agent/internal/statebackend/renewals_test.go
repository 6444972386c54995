package statebackend

// RenewedLocks returns the state keys whose locks this handler currently renews.
func (h *Handler) RenewedLocks() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := make([]string, 0, len(h.renewals))
	for k := range h.renewals {
		out = append(out, k)
	}
	return out
}
