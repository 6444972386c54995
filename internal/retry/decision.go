package retry

import (
	"errors"
	"net"
	"net/http"
	"syscall"

	"github.com/outpost-dev/terraform-provider-outpost/internal/api"
)

// Decision says whether a try that failed with err may be made again. There is one per
// intent, so a caller picks what it means ("this request may be applied twice", "this message
// must get through") rather than a list of status codes. None of them retries a permanent
// refusal (api.Permanent); they differ in what else they retry.
type Decision func(err error) bool

// Idempotent is for requests that may be applied twice without harm (reads, PUTs, the agent's
// polls, claims and events, which the orchestrator deduplicates): it retries every failure a
// retry can cure within seconds — the request never got an answer (network, a body cut off),
// 408, 429 and 5xx. It does not retry 401/403: only an operator cures those, and the caller's own
// loop (if it has one) waits for that with a longer backoff.
func Idempotent(err error) bool {
	var e *api.Error
	if errors.As(err, &e) {
		return e.StatusCode == http.StatusRequestTimeout || e.StatusCode == http.StatusTooManyRequests || e.StatusCode >= 500
	}
	// The client joins api.ErrUnavailable onto every failure to get an answer.
	return errors.Is(err, api.ErrUnavailable)
}

// Unapplied is for requests that must not be applied twice (creates): it retries only what the
// server cannot have acted on — 429 and 503, which refuse before doing anything, and a
// connection that was never established. A 500 or a timeout may come after the create took
// effect, so it is returned to the caller instead of risking a duplicate.
func Unapplied(err error) bool {
	var e *api.Error
	if errors.As(err, &e) {
		return e.StatusCode == http.StatusTooManyRequests || e.StatusCode == http.StatusServiceUnavailable
	}
	return neverSent(err)
}

// Eventually is for messages that must get through however long it takes (the agent's final
// events): every failure but a permanent refusal is retried, 401/403 included, because a key
// that is registered or rotated later lets the same message in.
func Eventually(err error) bool { return !api.Permanent(err) }

// WhileTokenHolds is for the job runner's own requests, made with its job token: like
// Eventually, but 401 and 403 end it too. The token is never renewed, so once the orchestrator
// refuses it (the attempt ended, lost its job lease or was superseded) no retry can succeed.
func WhileTokenHolds(err error) bool {
	return Eventually(err) && !errors.Is(err, api.ErrUnauthorized) && !errors.Is(err, api.ErrForbidden)
}

// neverSent reports whether a request cannot have reached the server.
func neverSent(err error) bool {
	if errors.Is(err, syscall.ECONNREFUSED) {
		return true
	}
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "dial"
}
