package cli

import (
	"errors"
	"fmt"

	"github.com/spf13/cobra"

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
	case errors.Is(err, api.ErrOrgNotFound):
		return fmt.Sprintf("no such organisation %q on the orchestrator at %s (the organisation is from %s): nothing was ever created in it.\n"+
			"Check the name, and fix it with --org, %s or `outpost config set org NAME`. A new organisation begins with its first state storage: `outpost state-storage create -f FILE`.",
			s.org.Value, s.apiURL.Value, s.org.From, envOrg)
	case errors.Is(err, api.ErrUnavailable) && !isAPI:
		return fmt.Sprintf("cannot reach the orchestrator at %s (URL from %s): %v\nIs it running, and is the URL right?",
			s.apiURL.Value, s.apiURL.From, err)
	}
	return err.Error()
}

// idProblem checks an id the user gave (where names the flag, argument or field) the way the API
// will, before anything is sent. An invalid one gets the valid id api.DeriveID makes of it, the
// suggestion the provider's runner_id function gives, since ids are often made from kube
// context or cluster names.
func idProblem(where, id string) error {
	err := api.ValidateID(where, id)
	if err == nil {
		return nil
	}
	var fe *api.FieldError
	if errors.As(err, &fe) {
		err = fmt.Errorf("%s: %s", where, fe.Message)
	}
	if derived, derr := api.DeriveID(id); derr == nil {
		err = fmt.Errorf("%w; a valid id made from it is %s (as the provider's runner_id function makes it, the same on every run)", err, derived)
	}
	return &usageError{err}
}

// idArgs wants lo to hi arguments (hi < 0: no upper bound, what says what is expected), each a
// valid id (kind names it in messages: "runner id").
func idArgs(lo, hi int, what, kind string) cobra.PositionalArgs {
	count := rangeArgs(lo, hi, what)
	return func(cmd *cobra.Command, args []string) error {
		if err := count(cmd, args); err != nil {
			return err
		}
		for _, id := range args {
			if err := idProblem(kind, id); err != nil {
				return err
			}
		}
		return nil
	}
}

// notFound rewrites a not-found answer about a named resource into what to do about it.
func notFound(err error, kind, id, org, listCmd string) error {
	if errors.Is(err, api.ErrNotFound) && !errors.Is(err, api.ErrOrgNotFound) {
		return fmt.Errorf("%s %s does not exist in org %s; list %ss with `%s`", kind, id, org, kind, listCmd)
	}
	return err
}
