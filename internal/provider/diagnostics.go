package provider

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/hashicorp/terraform-plugin-framework/diag"

	"github.com/outpost-dev/terraform-provider-outpost/internal/api"
)

// Diagnostics used by more than one resource. Every detail says what failed, what to do, and
// ends with the original error.

// addAPIError adds the diagnostic for a failed orchestrator call. what completes "Outpost could
// not ..." (e.g. `register runner "r1"`); hint, when not empty, is the advice for a conflict.
func addAPIError(diags *diag.Diagnostics, summary, what string, err error, conflictHint string) {
	var advice string
	switch {
	case errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled):
		advice = "The operation ran out of time or was interrupted. Run the command again; raise the resource's timeouts if this repeats."
	case errors.Is(err, api.ErrUnauthorized):
		advice = "The orchestrator refused the token. Check the provider's token (or " + envToken + ")."
	case errors.Is(err, api.ErrForbidden):
		advice = "The token is valid but may not do this. Use an admin token of the orchestrator."
	case errors.Is(err, api.ErrConflict) && conflictHint != "":
		advice = conflictHint
	case errors.Is(err, api.ErrInvalid):
		advice = "The orchestrator refused the request as invalid; fix the attribute named in the error."
	case errors.Is(err, api.ErrUnavailable):
		advice = "The orchestrator is unreachable or failing. Check the provider's api_url (or " + envAPIURL + ") and that the orchestrator is running, then retry."
	default:
		advice = "Check the orchestrator's logs for the request id in the error, then retry."
	}
	diags.AddError(summary, fmt.Sprintf("Outpost could not %s. %s\n\nOriginal error: %s", what, advice, err))
}

// addKubeError adds the diagnostic for a failed Kubernetes call.
func addKubeError(diags *diag.Diagnostics, summary, what, advice string, err error) {
	diags.AddError(summary, fmt.Sprintf("Outpost could not %s. %s\n\nOriginal error: %s", what, strings.TrimSpace(advice), err))
}

// addNotRegistered adds the diagnostic of a data source whose object the orchestrator does not
// know; resourceType is the resource that registers such objects.
func addNotRegistered(diags *diag.Diagnostics, summary, what, resourceType, id, org string, err error) {
	diags.AddError(summary, fmt.Sprintf("No %s %q is registered in organisation %q. Check the id, or register it with an %s resource.\n\nOriginal error: %s",
		what, id, org, resourceType, err))
}
