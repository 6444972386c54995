package orchestrator

import (
	"context"
	"net/http"

	"github.com/outpost-dev/terraform-provider-outpost/internal/api"
	"github.com/outpost-dev/terraform-provider-outpost/internal/orchestrator/console"
)

// mountConsole serves the web console (package console) on the API's mux, outside /api/: its
// pages and streams pass through the same outer middleware (request id, access log, metrics,
// shutdown gate) as the API, with their own authentication (sessions, not bearer tokens).
func (s *Server) mountConsole() error {
	c, err := console.New(console.Config{
		Store: s.store,
		Authenticate: func(ctx context.Context, token string) (console.Principal, error) {
			p, err := s.authenticateToken(ctx, token)
			if err != nil {
				return console.Principal{}, err
			}
			return console.Principal{Admin: p.bootstrap, Org: p.org, TokenID: p.tokenID, TokenHash: p.tokenHash}, nil
		},
		Connected:   func(org string, r *api.Runner) bool { return s.runnerView(org, r).Status.Connected },
		Wake:        s.notify.Wake,
		Version:     s.cfg.Version,
		ExternalURL: s.cfg.ExternalURL,
		Now:         s.cfg.Now,
		Logger:      s.log.With("component", "console"),
		Closing:     s.closing,
	})
	if err != nil {
		return err
	}
	for _, rt := range c.Routes() {
		pattern, h := rt.Pattern, rt.Handler
		s.mux.Handle(pattern, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			infoOf(r.Context()).route = pattern
			h.ServeHTTP(w, r)
		}))
	}
	return nil
}
