package store

import (
	"errors"
	"fmt"

	"github.com/outpost-dev/terraform-provider-outpost/internal/api"
)

// Refusal is a request the API turns down: the API error code (api.Code*) and a message that
// says what is wrong and where. Store methods return it for every outcome the caller caused, so
// handlers never have to guess from an error string; the HTTP face answers each code with its
// one status, and anything else with a 500.
type Refusal struct {
	Code    string
	Message string
	Field   string
	// Committed is set on offset_mismatch so the writer can resume.
	Committed *int64
	// AuthReason, when set, is the label under which the refusal is counted in
	// outpost_orchestrator_auth_failures_total.
	AuthReason string
}

// Error is the message, prefixed with the field it blames when there is one.
func (e *Refusal) Error() string {
	if e.Field != "" {
		return e.Field + ": " + e.Message
	}
	return e.Message
}

// Refuse is a refusal with an API error code (api.Code*) and a message.
func Refuse(code, format string, args ...any) *Refusal {
	return &Refusal{Code: code, Message: fmt.Sprintf(format, args...)}
}

// NotFound refuses with not_found.
func NotFound(format string, args ...any) *Refusal {
	return Refuse(api.CodeNotFound, format, args...)
}

func conflict(format string, args ...any) *Refusal {
	return Refuse(api.CodeConflict, format, args...)
}

func staleFencing(format string, args ...any) *Refusal {
	return Refuse(api.CodeStaleFencing, format, args...)
}

// Invalid is an invalid_argument refusal blamed on one field of the request (a JSON path, a query parameter or a
// path parameter).
func Invalid(field, format string, args ...any) *Refusal {
	r := Refuse(api.CodeInvalid, format, args...)
	r.Field = field
	return r
}

func unauthorized(format string, args ...any) *Refusal {
	return Refuse(api.CodeUnauthorized, format, args...)
}

// Auth failure reasons besides agentauth.Reason.
const (
	AuthReasonAdminToken      = "admin_token"
	AuthReasonOrgToken        = "org_token"
	AuthReasonOtherOrg        = "other_org"
	AuthReasonJobToken        = "job_token"
	AuthReasonJobTokenExpired = "job_token_expired"
	AuthReasonRunnerGone      = "runner_gone"
)

func offsetMismatch(committed int64, sent int64) *Refusal {
	r := Refuse(api.CodeOffsetMismatch,
		"append at offset %d does not continue the log: the committed offset is %d; resend from there", sent, committed)
	r.Committed = &committed
	return r
}

// UnavailableError says the database could not be reached, or its connection was lost,
// for longer than a request waits (outageWait), and that nothing of the request was applied.
type UnavailableError struct{ Err error }

// Error says the database is unreachable and nothing changed.
func (e *UnavailableError) Error() string {
	return "the database is unreachable (nothing was changed): " + e.Err.Error()
}

// Unwrap is the error of the lost connection.
func (e *UnavailableError) Unwrap() error { return e.Err }

// AsRefusal maps an error onto the response it deserves; ok is false for internal errors.
func AsRefusal(err error) (*Refusal, bool) {
	var r *Refusal
	if errors.As(err, &r) {
		return r, true
	}
	var fe *api.FieldError
	if errors.As(err, &fe) {
		return Invalid(fe.Field, "%s", fe.Message), true
	}
	return nil, false
}
