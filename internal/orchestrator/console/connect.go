package console

import (
	"context"
	"net/http"
	"strings"

	"github.com/outpost-dev/terraform-provider-outpost/internal/api"
	"github.com/outpost-dev/terraform-provider-outpost/internal/orchestrator/store"
)

// defaultNewRunner is the runner id the connect page suggests before one is typed.
const defaultNewRunner = "my-cluster"

// connectBody is the connect page: how to install an agent for a runner (the Terraform module
// call, or Helm by hand) and, live, where that runner stands until its agent's first poll.
type connectBody struct {
	Org, RunnerID, APIURL string
	// Invalid says why the typed runner id cannot be one; the snippets then use the default.
	Invalid string
	Status  connectStatus
}

// connectStatus is the live part: the runner's way from nothing to connected.
type connectStatus struct {
	Org, RunnerID string
	// Stage is "unregistered", "registered" (no poll yet), "refused" or "connected".
	Stage        string
	AgentVersion string
	LastPoll     string
	Refusal      string
}

// Final reports whether the runner is connected: the live part has nothing more to wait for.
func (s connectStatus) Final() bool { return s.Stage == "connected" }

// apiURL is the orchestrator's address for the snippets: the configured external URL, else the
// one the browser used.
func (c *Console) apiURL(r *http.Request) string {
	if c.cfg.ExternalURL != "" {
		return strings.TrimRight(c.cfg.ExternalURL, "/")
	}
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	}
	return scheme + "://" + r.Host
}

// connectRunner is the runner id the page is for: the query's, when it is a valid id.
func connectRunner(r *http.Request) (id, invalid string) {
	id = strings.TrimSpace(r.URL.Query().Get("runner"))
	if id == "" {
		return defaultNewRunner, ""
	}
	if err := api.ValidateID("runner", id); err != nil {
		return defaultNewRunner, err.Error()
	}
	return id, ""
}

func (c *Console) connectStatus(ctx context.Context, org, id string) (connectStatus, error) {
	st := connectStatus{Org: org, RunnerID: id, Stage: "unregistered"}
	r, err := c.cfg.Store.GetRunner(ctx, org, id)
	if err != nil {
		if ref, ok := store.AsRefusal(err); ok && ref.Code == api.CodeNotFound {
			return st, nil
		}
		return st, err
	}
	now := c.cfg.Now()
	st.AgentVersion = r.Status.AgentVersion
	refused := r.Status.Refused()
	switch {
	case c.cfg.Connected(org, r):
		st.Stage = "connected"
	case refused != nil:
		st.Stage = "refused"
		st.Refusal = refused.Message
	default:
		st.Stage = "registered"
	}
	if r.Status.LastSeenAt != nil {
		st.LastPoll = ago(now.Sub(*r.Status.LastSeenAt))
	}
	return st, nil
}

func (c *Console) connect(w http.ResponseWriter, r *http.Request, v *visit) error {
	id, invalid := connectRunner(r)
	st, err := c.connectStatus(r.Context(), v.org, id)
	if err != nil {
		return err
	}
	body := &connectBody{Org: v.org, RunnerID: id, APIURL: c.apiURL(r), Invalid: invalid, Status: st}
	c.render(w, http.StatusOK, "connect", pageOf(v, "Connect a runner", "runners", body))
	return nil
}

// connectLive follows the runner of the connect page until its agent is connected.
func (c *Console) connectLive(w http.ResponseWriter, r *http.Request, v *visit) error {
	id, _ := connectRunner(r)
	return c.fragmentStream(w, r, "connect", func() (string, bool, error) {
		st, err := c.connectStatus(r.Context(), v.org, id)
		if err != nil {
			return "", true, err
		}
		html, err := c.fragment("connect", "connect-status", st)
		return html, st.Final(), err
	})
}
