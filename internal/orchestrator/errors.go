package orchestrator

import (
	"errors"
	"fmt"

	"github.com/outpost-dev/terraform-provider-outpost/internal/api"
)

// refusal is a request the API turns down: the API error code (api.Code*) and a message that
// says what is wrong and where. Store methods return it for every outcome the caller caused, so
// handlers never have to guess from an error string; the HTTP face answers each code with its
// one status (statusOf), and anything else with a 500.
type refusal struct {
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

func refuse(code, format string, args ...any) *refusal {
	return &refusal{code: code, message: fmt.Sprintf(format, args...)}
}

func notFound(format string, args ...any) *refusal {
	return refuse(api.CodeNotFound, format, args...)
}

func conflict(format string, args ...any) *refusal {
	return refuse(api.CodeConflict, format, args...)
}

func staleFencing(format string, args ...any) *refusal {
	return refuse(api.CodeStaleFencing, format, args...)
}

// invalid is an invalid_argument refusal blamed on one field of the request (a JSON path, a query parameter or a
// path parameter).
func invalid(field, format string, args ...any) *refusal {
	r := refuse(api.CodeInvalid, format, args...)
	r.field = field
	return r
}

func unauthorized(format string, args ...any) *refusal {
	return refuse(api.CodeUnauthorized, format, args...)
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
	r := refuse(api.CodeOffsetMismatch,
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
