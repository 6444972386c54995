package api

import (
	"errors"
	"fmt"
	"net/http"
	"time"
)

// Sentinel errors. Use errors.Is(err, api.ErrNotFound) and friends; *Error carries the details.
var (
	ErrNotFound        = errors.New("not found")
	ErrConflict        = errors.New("conflict")
	ErrInvalid         = errors.New("invalid request")
	ErrUnauthorized    = errors.New("unauthorized")
	ErrForbidden       = errors.New("forbidden")
	ErrTooLarge        = errors.New("request too large")
	ErrRateLimited     = errors.New("rate limited")
	ErrUnavailable     = errors.New("orchestrator unavailable")
	ErrOffsetMismatch  = errors.New("log offset mismatch")
	ErrStaleFencing    = errors.New("stale fencing number")
	ErrUnsupportedType = errors.New("unsupported media type")
	// ErrIncompatibleProtocol: the agent and the orchestrator speak no agent protocol version in
	// common (the message names both releases and ranges).
	ErrIncompatibleProtocol = errors.New("incompatible agent protocol")
	// ErrUnknownKey: the orchestrator has no key of the runner that matches the agent token's
	// key (HTTP 401 with CodeUnknownKey). Also an ErrUnauthorized.
	ErrUnknownKey = errors.New("unknown agent key")
	// ErrOrgNotFound: the organisation of an admin request does not exist on the orchestrator
	// (a mistyped --org). It is an ErrNotFound too.
	ErrOrgNotFound = errors.New("no such organisation")
	// ErrEventBatchUnsupported: the orchestrator that answered has no route for an EventBatch
	// (a replica of a release before ProtocolEventBatch, while replicas are replaced one at a
	// time); send the events one by one.
	ErrEventBatchUnsupported = errors.New("the orchestrator takes no event batches")
)

// Error codes in the JSON error body.
const (
	CodeNotFound       = "not_found"
	CodeConflict       = "conflict"
	CodeInvalid        = "invalid_argument"
	CodeUnauthorized   = "unauthorized"
	CodeForbidden      = "forbidden"
	CodeTooLarge       = "too_large"
	CodeRateLimited    = "rate_limited"
	CodeUnavailable    = "unavailable"
	CodeInternal       = "internal"
	CodeOffsetMismatch = "offset_mismatch"
	CodeStaleFencing   = "stale_fencing"
	CodeMediaType      = "unsupported_media_type"
	// CodeIncompatibleProtocol refuses a poll from an agent whose protocol range does not meet
	// the orchestrator's (HTTP 409).
	CodeIncompatibleProtocol = "incompatible_protocol"
	// CodeRequestTimeout answers a request whose body did not arrive within the server's read
	// timeout (HTTP 408, retried like any other "later").
	CodeRequestTimeout = "request_timeout"
	// CodeUnknownKey refuses an agent request signed with a key the runner does not have (HTTP
	// 401): the agent tries another key it holds, and otherwise says which key to register.
	CodeUnknownKey = "unknown_key"
	// CodeOrgNotFound answers an admin request about an organisation in which nothing was ever
	// created (HTTP 404), so a mistyped organisation is not shown as an empty one.
	CodeOrgNotFound = "org_not_found"
	// CodeQuotaExceeded refuses a create that would take an organisation beyond one of the
	// orchestrator's quotas (HTTP 403; the message names the quota, the count and the flag).
	CodeQuotaExceeded = "quota_exceeded"
	// CodeApprovalRequired refuses an apply or destroy on a runner with require_approval that
	// is not the apply of an approved saved plan (HTTP 403).
	CodeApprovalRequired = "approval_required"
	// Refusals of an apply of a saved plan, and of approving one (HTTP 409): the plan is not
	// approved yet, expired, was applied already, was discarded, is not ready (its deployment has
	// not succeeded with a summary), or the state moved since the plan was made.
	CodePlanNotApproved = "plan_not_approved"
	CodePlanExpired     = "plan_expired"
	CodePlanApplied     = "plan_applied"
	CodePlanDiscarded   = "plan_discarded"
	CodePlanNotReady    = "plan_not_ready"
	CodeStalePlan       = "stale_plan"
)

// ErrorBody is the JSON body of every 4xx/5xx response: {"error": {...}}.
type ErrorBody struct {
	Error ErrorDetail `json:"error"`
}

// ErrorDetail says what is wrong and where.
type ErrorDetail struct {
	Code    string `json:"code"`
	Message string `json:"message"`
	// Field is the JSON path of the offending field, when one is to blame (e.g. "job.pod_template").
	Field string `json:"field,omitempty"`
	// CommittedOffset is set on offset_mismatch.
	CommittedOffset *int64 `json:"committed_offset,omitempty"`
}

// Error is an error response from the orchestrator.
type Error struct {
	StatusCode int
	Code       string
	Message    string
	Field      string
	// CommittedOffset is set for log offset mismatches.
	CommittedOffset *int64
	// RequestID is the server's X-Request-Id, for support.
	RequestID string
	// RetryAfter is the wait the server asked for with Retry-After (0 when it said nothing). It
	// travels on the error so that every loop above the client backs off at least that long,
	// without a second look at the response.
	RetryAfter time.Duration
}

func (e *Error) Error() string {
	msg := e.Message
	if e.Field != "" {
		msg = e.Field + ": " + msg
	}
	if e.RequestID != "" {
		return fmt.Sprintf("orchestrator: %s (HTTP %d, %s, request %s)", msg, e.StatusCode, e.Code, e.RequestID)
	}
	return fmt.Sprintf("orchestrator: %s (HTTP %d, %s)", msg, e.StatusCode, e.Code)
}

// Is maps the error onto the package's sentinels.
func (e *Error) Is(target error) bool {
	switch target {
	case ErrNotFound:
		return e.StatusCode == http.StatusNotFound
	case ErrConflict:
		return e.StatusCode == http.StatusConflict
	case ErrInvalid:
		return e.StatusCode == http.StatusBadRequest || e.StatusCode == http.StatusUnprocessableEntity
	case ErrUnauthorized:
		return e.StatusCode == http.StatusUnauthorized
	case ErrForbidden:
		return e.StatusCode == http.StatusForbidden
	case ErrTooLarge:
		return e.StatusCode == http.StatusRequestEntityTooLarge
	case ErrRateLimited:
		return e.StatusCode == http.StatusTooManyRequests
	case ErrUnavailable:
		return e.StatusCode >= 500
	case ErrOffsetMismatch:
		return e.Code == CodeOffsetMismatch
	case ErrStaleFencing:
		return e.Code == CodeStaleFencing
	case ErrUnsupportedType:
		return e.StatusCode == http.StatusUnsupportedMediaType
	case ErrIncompatibleProtocol:
		return e.Code == CodeIncompatibleProtocol
	case ErrUnknownKey:
		return e.Code == CodeUnknownKey
	case ErrOrgNotFound:
		return e.Code == CodeOrgNotFound
	}
	return false
}

// Permanent is the one definition of a permanent error: the orchestrator refused the request for
// good, sending it again can never succeed, so it is not retried and a message it carried (a
// finished event) is given up. That is an *Error whose status is a 4xx other than 408 and 429
// (which say "later") and other than 401 and 403. Network errors and 5xx are never permanent.
//
// 401 and 403 are deliberately not permanent: they say "not with these credentials yet", and
// the request itself is fine. An agent whose key is not registered yet, was just rotated, or
// whose clock is off is let in once an operator acts, so its polls and finished events keep being
// retried with backoff instead of the agent dying or dropping an event. Not permanent does not
// mean retry at once, though: within one call the client retries only what a retry can cure
// (retry.Idempotent, retry.Unapplied), so a create refused with 401 is not sent again blindly;
// and a holder of a credential that is never renewed (the job token) treats 401/403 as
// the end (retry.WhileTokenHolds).
func Permanent(err error) bool {
	var e *Error
	if !errors.As(err, &e) {
		return false
	}
	switch e.StatusCode {
	case http.StatusRequestTimeout, http.StatusTooManyRequests, http.StatusUnauthorized, http.StatusForbidden:
		return false
	}
	return e.StatusCode >= 400 && e.StatusCode < 500
}

// RetryAfter is the wait the orchestrator asked for with the error (0 when it said nothing, or
// when err is not an *Error).
func RetryAfter(err error) time.Duration {
	var e *Error
	if errors.As(err, &e) {
		return e.RetryAfter
	}
	return 0
}
