package orchestrator

import (
	"context"
	"net/http"

	"github.com/outpost-dev/terraform-provider-outpost/internal/api"
)

// The routes of organisation tokens; only the bootstrap admin token reaches them (route.bootstrap).

func (s *Server) createOrgToken(w http.ResponseWriter, r *http.Request, c *call) error {
	// The answer holds the token, shown this once: no cache may keep it.
	w.Header().Set("Cache-Control", "no-store")
	return create(w, r, c, (*api.OrgTokenInput).Validate, func(ctx context.Context, in api.OrgTokenInput) (*api.CreatedOrgToken, error) {
		out, err := s.store.CreateOrgToken(ctx, c.org, in)
		if err == nil {
			s.log.Info("organisation token created", "org", c.org, "token_id", out.ID, "name", out.Name)
		}
		return out, err
	})
}

func (s *Server) listOrgTokens(w http.ResponseWriter, r *http.Request, c *call) error {
	list, err := s.store.ListOrgTokens(r.Context(), c.org)
	return listed(w, list, err)
}

func (s *Server) revokeOrgToken(w http.ResponseWriter, r *http.Request, c *call) error {
	return remove(w, r, func(ctx context.Context, id string) error {
		err := s.store.RevokeOrgToken(ctx, c.org, id)
		if err == nil {
			s.log.Info("organisation token revoked", "org", c.org, "token_id", id)
		}
		return err
	})
}
