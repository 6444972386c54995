package orchestrator

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"net/http"
	"strings"

	"github.com/outpost-dev/terraform-provider-outpost/internal/api"
	"github.com/outpost-dev/terraform-provider-outpost/internal/orchestrator/store"
)

// principal is who an admin request speaks for: the bootstrap admin token (--admin-token), which
// reaches every organisation and alone manages organisation tokens, or one organisation's token.
type principal struct {
	bootstrap bool
	org       string
	tokenID   string
	tokenName string
	tokenHash []byte
}

// String names the principal in access logs: the token's id and name, never the token.
func (p principal) String() string {
	if p.bootstrap {
		return "admin"
	}
	return "org " + p.org + " token " + p.tokenID + " (" + p.tokenName + ")"
}

// reaches refuses an organisation token on another organisation with the 404 that an object which
// does not exist gets, and the same message whether or not the organisation or the object exist,
// so a token learns nothing about the organisations it cannot reach.
func (p principal) reaches(org string) error {
	if p.bootstrap || p.org == org {
		return nil
	}
	r := store.NotFound("not found: this organisation token reaches only organisation %q", p.org)
	r.AuthReason = store.AuthReasonOtherOrg
	return r
}

// authenticateAdmin identifies the bearer of an admin request. The bootstrap token is compared by
// hash in constant time, so neither its bytes nor its length leak through timing; an
// organisation token (prefix opo_) is looked up by its SHA-256, which reveals nothing about
// any stored token either.
func (s *Server) authenticateAdmin(r *http.Request) (principal, error) {
	tok, ok := bearer(r)
	if !ok {
		return principal{}, &store.Refusal{Code: api.CodeUnauthorized, AuthReason: store.AuthReasonAdminToken,
			Message: "missing admin token: send Authorization: Bearer <token> (the bootstrap admin token or an organisation token)"}
	}
	return s.authenticateToken(r.Context(), tok)
}

// authenticateToken identifies the holder of an admin token: the API's bearer token, or the
// token typed into the console's sign-in form.
func (s *Server) authenticateToken(ctx context.Context, tok string) (principal, error) {
	if strings.HasPrefix(tok, api.OrgTokenPrefix) {
		rec, err := s.store.OrgTokenByHash(ctx, store.TokenHash(tok))
		if err != nil {
			return principal{}, err
		}
		if rec == nil {
			return principal{}, &store.Refusal{Code: api.CodeUnauthorized, AuthReason: store.AuthReasonOrgToken,
				Message: "the organisation token is not valid for this orchestrator: it was revoked, or never issued here"}
		}
		return principal{org: rec.Org, tokenID: rec.ID, tokenName: rec.Name, tokenHash: rec.Hash}, nil
	}
	given := sha256.Sum256([]byte(tok))
	if subtle.ConstantTimeCompare(given[:], s.admin[:]) != 1 {
		return principal{}, &store.Refusal{Code: api.CodeUnauthorized, AuthReason: store.AuthReasonAdminToken,
			Message: "the admin token is not valid for this orchestrator"}
	}
	return principal{bootstrap: true}, nil
}
