package orchestrator

import (
	"errors"
	"log/slog"
	"net/http"

	"github.com/outpost-dev/terraform-provider-outpost/internal/api"
	"github.com/outpost-dev/terraform-provider-outpost/internal/orchestrator/store"
)

// codeStatus is the HTTP status of each error code a refusal carries: the store refuses with an
// API error code, and only the HTTP face knows what status answers it.
var codeStatus = map[string]int{
	api.CodeInvalid:              http.StatusBadRequest,
	api.CodeUnauthorized:         http.StatusUnauthorized,
	api.CodeUnknownKey:           http.StatusUnauthorized,
	api.CodeForbidden:            http.StatusForbidden,
	api.CodeQuotaExceeded:        http.StatusForbidden,
	api.CodeApprovalRequired:     http.StatusForbidden,
	api.CodePlanNotApproved:      http.StatusConflict,
	api.CodePlanExpired:          http.StatusConflict,
	api.CodePlanApplied:          http.StatusConflict,
	api.CodePlanDiscarded:        http.StatusConflict,
	api.CodePlanNotReady:         http.StatusConflict,
	api.CodeStalePlan:            http.StatusConflict,
	api.CodeNotFound:             http.StatusNotFound,
	api.CodeOrgNotFound:          http.StatusNotFound,
	codeMethodNotAllowed:         http.StatusMethodNotAllowed,
	api.CodeRequestTimeout:       http.StatusRequestTimeout,
	api.CodeConflict:             http.StatusConflict,
	api.CodeStaleFencing:         http.StatusConflict,
	api.CodeOffsetMismatch:       http.StatusConflict,
	api.CodeIncompatibleProtocol: http.StatusConflict,
	api.CodeTooLarge:             http.StatusRequestEntityTooLarge,
	api.CodeMediaType:            http.StatusUnsupportedMediaType,
	api.CodeInternal:             http.StatusInternalServerError,
	api.CodeUnavailable:          http.StatusServiceUnavailable,
}

// codeMethodNotAllowed answers a known path asked with a method it does not serve.
const codeMethodNotAllowed = "method_not_allowed"

// statusOf is the HTTP status of a refusal's code; a code without one is a bug, answered 500.
func statusOf(code string) int {
	if st, ok := codeStatus[code]; ok {
		return st
	}
	return http.StatusInternalServerError
}

// writeError answers with the JSON error body of err. Internal errors are logged with the
// request id and answered with a message that names the id but not the cause, since causes
// (file paths, storage errors) are the operator's business, not the caller's.
func writeError(w http.ResponseWriter, r *http.Request, log *slog.Logger, err error) {
	ref, ok := store.AsRefusal(err)
	var unavailable *store.UnavailableError
	switch {
	case ok:
	case errors.As(err, &unavailable):
		// Nothing was applied, so even a create may be sent again (retry.Unapplied retries 503).
		id := requestID(r.Context())
		log.WarnContext(r.Context(), "request refused: the database is unreachable", "request_id", id, "route", routeOf(r.Context()), "err", err)
		w.Header().Set("Retry-After", "2")
		ref = store.Refuse(api.CodeUnavailable,
			"the orchestrator cannot reach its database right now and changed nothing; retry shortly (request id %s)", id)
	default:
		id := requestID(r.Context())
		log.ErrorContext(r.Context(), "request failed", "request_id", id, "route", routeOf(r.Context()), "err", err)
		ref = store.Refuse(api.CodeInternal,
			"internal error; the orchestrator log has the details under request id %s", id)
	}
	writeRefusal(w, ref)
}

func writeRefusal(w http.ResponseWriter, ref *store.Refusal) {
	body := api.ErrorBody{Error: api.ErrorDetail{
		Code: ref.Code, Message: ref.Message, Field: ref.Field, CommittedOffset: ref.Committed,
	}}
	writeJSON(w, statusOf(ref.Code), body)
}
