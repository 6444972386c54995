package console

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"time"

	"github.com/outpost-dev/terraform-provider-outpost/internal/api"
	"github.com/outpost-dev/terraform-provider-outpost/internal/keys"
)

// pageSize is how many deployments one page of the list shows.
const pageSize = 50

// maxQueueShown is where the runners page stops counting a queue (it then reads "10000+").
const maxQueueShown = 10000

// runnerRow is one line of the runners table.
type runnerRow struct {
	ID, Description, Status, AgentVersion, LastPoll string
	Skew                                            bool
	InFlight, MaxConcurrency, Queued                int
	// QueueFull says the queue was counted only up to maxQueueShown.
	QueueFull                 bool
	Namespace, ServiceAccount string
	// Refusal is the agent's last refused request while nothing of it got in since, in words.
	Refusal string
	Keys    []keyView
}

type keyView struct {
	Fingerprint     string
	InUse, Retiring bool
}

type runnersBody struct {
	Org, Version string
	Runners      []runnerRow
}

func (c *Console) runnersBody(ctx context.Context, org string) (*runnersBody, error) {
	list, err := c.cfg.Store.ListRunners(ctx, org)
	if err != nil {
		return nil, err
	}
	ids := make([]string, len(list))
	for i := range list {
		ids[i] = list[i].ID
	}
	work, err := c.cfg.Store.RunnersWork(ctx, org, ids, maxQueueShown)
	if err != nil {
		return nil, err
	}
	now := c.cfg.Now()
	out := &runnersBody{Org: org, Version: c.cfg.Version}
	for i := range list {
		r := &list[i]
		row := runnerRow{
			ID: r.ID, Description: r.Description, AgentVersion: r.Status.AgentVersion,
			Skew:     r.Status.AgentVersion != "" && r.Status.AgentVersion != c.cfg.Version,
			InFlight: work[r.ID].InFlight, MaxConcurrency: r.MaxConcurrency, Queued: work[r.ID].Queued,
			Namespace: r.Job.Namespace, ServiceAccount: r.Job.ServiceAccount, LastPoll: "never",
		}
		row.QueueFull = row.Queued >= maxQueueShown
		if r.Status.LastSeenAt != nil {
			row.LastPoll = ago(now.Sub(*r.Status.LastSeenAt))
		}
		refused := r.Status.Refused()
		connected := c.cfg.Connected(org, r)
		if refused != nil {
			row.Refusal = fmt.Sprintf("refused %s: %s", ago(now.Sub(refused.At)), refused.Message)
		}
		switch {
		case refused != nil && !connected && refused.Code == api.CodeUnknownKey:
			row.Status = "key-refused"
		case refused != nil && !connected && refused.Code == api.CodeIncompatibleProtocol:
			row.Status = "incompatible-version"
		case r.Status.LastSeenAt == nil:
			row.Status = "never-connected"
		case !connected:
			row.Status = "offline"
		case row.InFlight > 0:
			row.Status = "busy"
		default:
			row.Status = "idle"
		}
		for _, p := range r.PublicKeys {
			if pub, err := keys.ParsePublicPEM(p); err == nil {
				f := keys.Fingerprint(pub)
				row.Keys = append(row.Keys, keyView{Fingerprint: f, InUse: f == r.Status.KeyFingerprint})
			}
		}
		for _, k := range r.RetiringKeys {
			row.Keys = append(row.Keys, keyView{Fingerprint: k.Fingerprint, Retiring: true, InUse: k.Fingerprint == r.Status.KeyFingerprint})
		}
		out.Runners = append(out.Runners, row)
	}
	return out, nil
}

// ago says how long ago something happened, in the unit a person reads at a glance.
func ago(d time.Duration) string {
	switch {
	case d < 0:
		return "just now"
	case d < time.Minute:
		return fmt.Sprintf("%d s ago", int(d.Seconds()))
	case d < time.Hour:
		return fmt.Sprintf("%d min ago", int(d.Minutes()))
	case d < 48*time.Hour:
		return fmt.Sprintf("%d h ago", int(d.Hours()))
	}
	return fmt.Sprintf("%d days ago", int(d.Hours()/24))
}

func (c *Console) runners(w http.ResponseWriter, r *http.Request, v *visit) error {
	body, err := c.runnersBody(r.Context(), v.org)
	if err != nil {
		return err
	}
	c.render(w, http.StatusOK, "runners", pageOf(v, "Runners", "runners", body))
	return nil
}

// deploymentFilter is the deployments list's query: statuses (several), runner, operation, a
// creation time range, and the page.
type deploymentFilter struct {
	statuses  []api.Status
	runner    string
	operation api.Operation
	from, to  time.Time
	page      int
	// raw keeps the form's own values for the inputs and the links.
	fromRaw, toRaw string
}

const timeInput = "2006-01-02T15:04"

func parseFilter(q url.Values) deploymentFilter {
	f := deploymentFilter{runner: q.Get("runner"), operation: api.Operation(q.Get("operation")), fromRaw: q.Get("from"), toRaw: q.Get("to")}
	for _, s := range q["status"] {
		if st := api.Status(s); st.Valid() && !slices.Contains(f.statuses, st) {
			f.statuses = append(f.statuses, st)
		}
	}
	if f.runner != "" && api.ValidateID("runner", f.runner) != nil {
		f.runner = ""
	}
	if !slices.Contains([]api.Operation{api.OperationPlan, api.OperationApply, api.OperationDestroy}, f.operation) {
		f.operation = ""
	}
	// Times typed into the form are UTC, as the list shows them.
	if t, err := time.Parse(timeInput, f.fromRaw); err == nil {
		f.from = t
	} else {
		f.fromRaw = ""
	}
	if t, err := time.Parse(timeInput, f.toRaw); err == nil {
		f.to = t
	} else {
		f.toRaw = ""
	}
	f.page, _ = strconv.Atoi(q.Get("page"))
	f.page = max(f.page, 0)
	return f
}

// query is the filter as a query string, on another page.
func (f deploymentFilter) query(page int) string {
	q := url.Values{}
	for _, s := range f.statuses {
		q.Add("status", string(s))
	}
	set := func(k, v string) {
		if v != "" {
			q.Set(k, v)
		}
	}
	set("runner", f.runner)
	set("operation", string(f.operation))
	set("from", f.fromRaw)
	set("to", f.toRaw)
	if page > 0 {
		q.Set("page", strconv.Itoa(page))
	}
	return q.Encode()
}

func (f deploymentFilter) keeps(d *api.Deployment) bool {
	return (len(f.statuses) == 0 || slices.Contains(f.statuses, d.Status)) &&
		(f.operation == "" || d.Operation == f.operation) &&
		(f.from.IsZero() || !d.CreatedAt.Before(f.from)) &&
		(f.to.IsZero() || d.CreatedAt.Before(f.to))
}

type choice struct {
	Value string
	On    bool
}

type deploymentsBody struct {
	Org                                            string
	Rows                                           []api.Deployment
	StatusChoices, RunnerChoices, OperationChoices []choice
	From, To, Query, Prev, Next                    string
	// First and Last number the rows shown, from 1.
	First, Last int
}

func (c *Console) deploymentsBody(ctx context.Context, org string, f deploymentFilter) (*deploymentsBody, error) {
	status := api.Status("")
	if len(f.statuses) == 1 {
		status = f.statuses[0] // the engine filters on it
	}
	rows, more, err := c.cfg.Store.PageDeployments(ctx, org, f.runner, status, f.keeps, f.page*pageSize, pageSize)
	if err != nil {
		return nil, err
	}
	b := &deploymentsBody{Org: org, Rows: rows, From: f.fromRaw, To: f.toRaw, Query: f.query(f.page), First: f.page*pageSize + 1, Last: f.page*pageSize + len(rows)}
	if f.page > 0 {
		b.Prev = f.query(f.page - 1)
	}
	if more {
		b.Next = f.query(f.page + 1)
	}
	for _, s := range api.Statuses {
		b.StatusChoices = append(b.StatusChoices, choice{string(s), slices.Contains(f.statuses, s)})
	}
	for _, o := range []api.Operation{api.OperationPlan, api.OperationApply, api.OperationDestroy} {
		b.OperationChoices = append(b.OperationChoices, choice{string(o), o == f.operation})
	}
	runners, err := c.cfg.Store.ListRunners(ctx, org)
	if err != nil {
		return nil, err
	}
	for _, r := range runners {
		b.RunnerChoices = append(b.RunnerChoices, choice{r.ID, r.ID == f.runner})
	}
	return b, nil
}

func (c *Console) deployments(w http.ResponseWriter, r *http.Request, v *visit) error {
	body, err := c.deploymentsBody(r.Context(), v.org, parseFilter(r.URL.Query()))
	if err != nil {
		return err
	}
	c.render(w, http.StatusOK, "deployments", pageOf(v, "Deployments", "deployments", body))
	return nil
}

type stateKeyRow struct {
	Storage, Key string
	Active, Last *api.Deployment
	Count        int
	// Reported is what the runner's agent last reported of the state in the cluster: its
	// versions (metadata only) and its lock holder; nil before any report.
	Reported *api.State
}

// stateKeys lists the state keys the organisation's deployments used, per state storage.
func (c *Console) stateKeys(w http.ResponseWriter, r *http.Request, v *visit) error {
	ctx := r.Context()
	runners, err := c.cfg.Store.ListRunners(ctx, v.org)
	if err != nil {
		return err
	}
	storageOf := map[string]string{}
	for _, rn := range runners {
		storageOf[rn.ID] = rn.StateStorageID
	}
	deps, err := c.cfg.Store.ListDeployments(ctx, v.org, "", "")
	if err != nil {
		return err
	}
	index := map[[2]string]*stateKeyRow{}
	var rows []*stateKeyRow
	for i := range deps { // newest first
		d := &deps[i]
		storage := storageOf[d.RunnerID]
		if storage == "" {
			storage = "(runner " + d.RunnerID + " deleted)"
		}
		k := [2]string{storage, d.StateKey}
		row := index[k]
		if row == nil {
			row = &stateKeyRow{Storage: storage, Key: d.StateKey, Last: d}
			index[k] = row
			rows = append(rows, row)
		}
		row.Count++
		if row.Active == nil && (d.Status == api.StatusClaimed || d.Status == api.StatusRunning) {
			row.Active = d
		}
	}
	// The lock holders and versions come from the agents' reports, per state storage; a state
	// no deployment of the list used (restored or imported in the cluster) shows too.
	storages := map[string]bool{}
	for _, id := range storageOf {
		if id != "" && !storages[id] {
			storages[id] = true
			states, err := c.cfg.Store.ListStates(ctx, v.org, id)
			if err != nil {
				return err
			}
			for i := range states {
				st := &states[i]
				k := [2]string{id, st.StateKey}
				row := index[k]
				if row == nil {
					row = &stateKeyRow{Storage: id, Key: st.StateKey}
					index[k] = row
					rows = append(rows, row)
				}
				row.Reported = st
			}
		}
	}
	slices.SortFunc(rows, func(a, b *stateKeyRow) int {
		if a.Storage != b.Storage {
			return compareStrings(a.Storage, b.Storage)
		}
		return compareStrings(a.Key, b.Key)
	})
	c.render(w, http.StatusOK, "state-keys", pageOf(v, "State keys", "state-keys", struct{ Keys []*stateKeyRow }{rows}))
	return nil
}

func compareStrings(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

type tokensBody struct {
	Tokens  []api.OrgToken
	Created *api.CreatedOrgToken
}

// tokens lists the organisation's tokens; like the API, only the admin token's sessions manage
// them.
func (c *Console) tokens(w http.ResponseWriter, r *http.Request, v *visit) error {
	return c.renderTokens(w, r, v, nil, "")
}

func (c *Console) renderTokens(w http.ResponseWriter, r *http.Request, v *visit, created *api.CreatedOrgToken, msg string) error {
	if !v.sess.Admin {
		return &pageError{http.StatusForbidden, "Only a session of the admin token manages organisation tokens; an organisation token cannot."}
	}
	list, err := c.cfg.Store.ListOrgTokens(r.Context(), v.org)
	if err != nil {
		return err
	}
	d := pageOf(v, "Organisation tokens", "tokens", tokensBody{Tokens: list, Created: created})
	d.Message = msg
	c.render(w, http.StatusOK, "tokens", d)
	return nil
}

func (c *Console) createToken(w http.ResponseWriter, r *http.Request, v *visit) error {
	if !v.sess.Admin {
		return c.renderTokens(w, r, v, nil, "")
	}
	in := api.OrgTokenInput{Name: r.PostForm.Get("name")}
	if err := in.Validate(); err != nil {
		return c.renderTokens(w, r, v, nil, err.Error())
	}
	out, err := c.cfg.Store.CreateOrgToken(r.Context(), v.org, in)
	if err != nil {
		return err
	}
	c.cfg.Logger.Info("organisation token created from the console", "org", v.org, "token_id", out.ID, "name", out.Name)
	return c.renderTokens(w, r, v, out, "")
}

func (c *Console) revokeToken(w http.ResponseWriter, r *http.Request, v *visit) error {
	if !v.sess.Admin {
		return c.renderTokens(w, r, v, nil, "")
	}
	id := r.PathValue("id")
	if err := c.cfg.Store.RevokeOrgToken(r.Context(), v.org, id); err != nil {
		return err
	}
	c.cfg.Logger.Info("organisation token revoked from the console", "org", v.org, "token_id", id)
	http.Redirect(w, r, "/orgs/"+v.org+"/tokens", http.StatusSeeOther)
	return nil
}
