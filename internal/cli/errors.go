package cli

import (
	"errors"
	"fmt"

	"github.com/outpost-dev/terraform-provider-outpost/internal/api"
)

// explain turns an error into what the user reads: what went wrong and what to do. The
// connection errors name where the URL and the token came from, because "401" alone does not
// say which of three token sources to fix.
func (a *app) explain(err error) string {
	s := a.settings
	var e *api.Error
	isAPI := errors.As(err, &e)
	switch {
	case s == nil:
	case errors.Is(err, api.ErrUnauthorized):
		return fmt.Sprintf("the orchestrator at %s refused the token from %s: %s\n"+
			"Set another with `outpost config set token` (reads it from stdin) or `outpost config set token_file PATH`, or set %s.",
			s.apiURL.Value, s.token.From, e.Message, envToken)
	case errors.Is(err, api.ErrForbidden):
		return fmt.Sprintf("the token from %s may not do this in organisation %q: %s\n"+
			"Use a token of that organisation, or pick another organisation with --org, %s or `outpost config set org`.",
			s.token.From, s.org.Value, e.Message, envOrg)
	case errors.Is(err, api.ErrUnavailable) && !isAPI:
		return fmt.Sprintf("cannot reach the orchestrator at %s (URL from %s): %v\nIs it running, and is the URL right?",
			s.apiURL.Value, s.apiURL.From, err)
	}
	return err.Error()
}

// notFound rewrites a not-found answer about a named resource into what to do about it.
func notFound(err error, kind, id, org, listCmd string) error {
	if errors.Is(err, api.ErrNotFound) {
		return fmt.Errorf("%s %s does not exist in org %s; list %ss with `%s`", kind, id, org, kind, listCmd)
	}
	return err
}
