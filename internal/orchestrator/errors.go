package orchestrator

import (
	"errors"
	"fmt"
	"log/slog"
	"net/http"

	"github.com/outpost-dev/terraform-provider-outpost/internal/api"
)

// refusal is a request the API turns down: the HTTP status, the error code and a message that
// says what is wrong and where. Store methods return it for every outcome the caller caused, so
// handlers never have to guess a status from an error string; anything else is a 500.
type refusal struct {
	status  int
	code    string
	message string
	field   string
	// committed is set on offset_mismatch so the writer can resume.
	committed *int64
	// authReason, when set, is the label under which the refusal is counted in
	// outpost_orchestrator_auth_failures_total.
	authReason string
}

func (e *refusal) Error() string {
	if e.field != "" {
		return e.field + ": " + e.message
	}
	return e.message
}

func refuse(status int, code, format string, args ...any) *refusal {
	return &refusal{status: status, code: code, message: fmt.Sprintf(format, args...)}
}

func notFound(format string, args ...any) *refusal {
	return refuse(http.StatusNotFound, api.CodeNotFound, format, args...)
}

func conflict(format string, args ...any) *refusal {
	return refuse(http.StatusConflict, api.CodeConflict, format, args...)
}

func staleFencing(format string, args ...any) *refusal {
	return refuse(http.StatusConflict, api.CodeStaleFencing, format, args...)
}

// invalid is a 400 blamed on one field of the request (a JSON path, a query parameter or a
// path parameter).
func invalid(field, format string, args ...any) *refusal {
	r := refuse(http.StatusBadRequest, api.CodeInvalid, format, args...)
	r.field = field
	return r
}

func unauthorized(format string, args ...any) *refusal {
	return refuse(http.StatusUnauthorized, api.CodeUnauthorized, format, args...)
}

// Auth failure reasons besides agentauth.Reason.
const (
	authReasonAdminToken      = "admin_token"
	authReasonOrgToken        = "org_token"
	authReasonOtherOrg        = "other_org"
	authReasonJobToken        = "job_token"
	authReasonJobTokenExpired = "job_token_expired"
	authReasonRunnerGone      = "runner_gone"
)

func offsetMismatch(committed int64, sent int64) *refusal {
	r := refuse(http.StatusConflict, api.CodeOffsetMismatch,
		"append at offset %d does not continue the log: the committed offset is %d; resend from there", sent, committed)
	r.committed = &committed
	return r
}

// storeUnavailableError says the database could not be reached, or its connection was lost,
// for longer than a request waits (outageWait), and that nothing of the request was applied.
type storeUnavailableError struct{ err error }

func (e *storeUnavailableError) Error() string {
	return "the database is unreachable (nothing was changed): " + e.err.Error()
}

func (e *storeUnavailableError) Unwrap() error { return e.err }

// asRefusal maps an error onto the response it deserves; ok is false for internal errors.
func asRefusal(err error) (*refusal, bool) {
	var r *refusal
	if errors.As(err, &r) {
		return r, true
	}
	var fe *api.FieldError
	if errors.As(err, &fe) {
		return invalid(fe.Field, "%s", fe.Message), true
	}
	return nil, false
}

// writeError answers with the JSON error body of err. Internal errors are logged with the
// request id and answered with a message that names the id but not the cause, since causes
// (file paths, storage errors) are the operator's business, not the caller's.
func writeError(w http.ResponseWriter, r *http.Request, log *slog.Logger, err error) {
	ref, ok := asRefusal(err)
	var unavailable *storeUnavailableError
	switch {
	case ok:
	case errors.As(err, &unavailable):
		// Nothing was applied, so even a create may be sent again (retry.Unapplied retries 503).
		id := requestID(r.Context())
		log.WarnContext(r.Context(), "request refused: the database is unreachable", "request_id", id, "route", routeOf(r.Context()), "err", err)
		w.Header().Set("Retry-After", "2")
		ref = refuse(http.StatusServiceUnavailable, api.CodeUnavailable,
			"the orchestrator cannot reach its database right now and changed nothing; retry shortly (request id %s)", id)
	default:
		id := requestID(r.Context())
		log.ErrorContext(r.Context(), "request failed", "request_id", id, "route", routeOf(r.Context()), "err", err)
		ref = refuse(http.StatusInternalServerError, api.CodeInternal,
			"internal error; the orchestrator log has the details under request id %s", id)
	}
	writeRefusal(w, ref)
}

func writeRefusal(w http.ResponseWriter, ref *refusal) {
	body := api.ErrorBody{Error: api.ErrorDetail{
		Code: ref.code, Message: ref.message, Field: ref.field, CommittedOffset: ref.committed,
	}}
	writeJSON(w, ref.status, body)
}
