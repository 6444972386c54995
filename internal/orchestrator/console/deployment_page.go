package console

import (
	"context"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/outpost-dev/terraform-provider-outpost/internal/api"
)

// timelineEntry is one line of a deployment's timeline: the deployment's own milestones and the
// events its agent sent (whatever kinds and reasons the API holds).
type timelineEntry struct {
	Time                  time.Time
	Kind, Reason, Message string
	// Detail is the cluster's own words (the scheduler's message, the registry's answer).
	Detail string
	// attempt and rank order entries within one second (see byTimeThenStep).
	attempt, rank int
}

// stepRank is where a step comes in an attempt's life: queued first, then api.Steps in order.
func stepRank(s api.Step) int {
	if i := slices.Index(api.Steps, s); i >= 0 {
		return i + 1
	}
	return slices.Index(api.Steps, api.StepCLIStarted) + 1
}

// byTimeThenStep orders the timeline by time to the second, then by attempt and by the step's
// place in an attempt's life: the steps the agent reads from Kubernetes carry times to the second
// only, so a Job created in the same second as the deployment was queued must not come first.
func byTimeThenStep(a, b timelineEntry) int {
	if c := a.Time.Truncate(time.Second).Compare(b.Time.Truncate(time.Second)); c != 0 {
		return c
	}
	if a.attempt != b.attempt {
		return a.attempt - b.attempt
	}
	return a.rank - b.rank
}

type outputView struct {
	Name, Value string
	Sensitive   bool
}

type deploymentBody struct {
	Org, CSRF  string
	D          *api.Deployment
	Cancelable bool
	Timeline   []timelineEntry
	Outputs    []outputView
	// Plan is the saved plan of a plan deployment with save_plan (nil for others), for review.
	Plan *api.SavedPlan
}

func (c *Console) deploymentBody(ctx context.Context, v *visit, id string) (*deploymentBody, error) {
	if api.ValidateID("id", id) != nil {
		return nil, errNotFound
	}
	d, err := c.cfg.Store.GetDeployment(ctx, v.org, id)
	if err != nil {
		return nil, err
	}
	events, err := c.cfg.Store.ListEvents(ctx, v.org, id)
	if err != nil {
		return nil, err
	}
	outputs, err := c.cfg.Store.GetOutputs(ctx, v.org, id)
	if err != nil {
		return nil, err
	}
	b := &deploymentBody{Org: v.org, CSRF: v.csrf, D: d, Cancelable: !d.Status.Terminal() && !d.CancelRequested}
	if d.SavePlan {
		if b.Plan, err = c.cfg.Store.GetPlan(ctx, v.org, id); err != nil {
			return nil, err
		}
	}
	b.Timeline = append(b.Timeline, timelineEntry{Time: d.CreatedAt, Kind: "queued", attempt: 1})
	// The store records a claimed step at each claim; a deployment claimed before it did has
	// only ClaimedAt.
	if d.ClaimedAt != nil && !slices.ContainsFunc(events, func(e api.Event) bool { return e.Step == api.StepClaimed }) {
		b.Timeline = append(b.Timeline, timelineEntry{Time: *d.ClaimedAt, Kind: "claimed", attempt: max(d.Attempt, 1), rank: stepRank(api.StepClaimed)})
	}
	for _, e := range events {
		kind := string(e.Type)
		if e.Step != "" {
			kind = strings.ReplaceAll(string(e.Step), "_", " ")
		}
		if e.Result != "" {
			kind += " " + string(e.Result)
		}
		if e.Node != "" {
			kind += " on " + e.Node
		}
		if e.Attempt > 1 {
			kind += " (attempt " + strconv.Itoa(e.Attempt) + ")"
		}
		msg := e.Message
		if e.By != "" {
			msg += " (by " + e.By + ")"
		}
		b.Timeline = append(b.Timeline, timelineEntry{Time: e.Time, Kind: kind, Reason: string(e.Reason), Message: msg, Detail: e.Detail,
			attempt: e.Attempt, rank: stepRank(e.Step)})
	}
	slices.SortStableFunc(b.Timeline, byTimeThenStep)
	names := make([]string, 0, len(outputs))
	for n := range outputs {
		names = append(names, n)
	}
	slices.Sort(names)
	for _, n := range names {
		o := outputs[n]
		ov := outputView{Name: n, Sensitive: o.Sensitive}
		if !o.Sensitive {
			ov.Value = string(o.Value)
		}
		b.Outputs = append(b.Outputs, ov)
	}
	return b, nil
}

func (c *Console) deployment(w http.ResponseWriter, r *http.Request, v *visit) error {
	body, err := c.deploymentBody(r.Context(), v, r.PathValue("id"))
	if err != nil {
		return err
	}
	c.render(w, http.StatusOK, "deployment", pageOf(v, "Deployment "+body.D.ID, "deployments", body))
	return nil
}

// cancel asks for a deployment's cancellation, as the API's cancel does, and goes back to it.
func (c *Console) cancel(w http.ResponseWriter, r *http.Request, v *visit) error {
	id := r.PathValue("id")
	if api.ValidateID("id", id) != nil {
		return errNotFound
	}
	d, err := c.cfg.Store.CancelDeployment(r.Context(), v.org, id)
	if err != nil {
		return err
	}
	c.cfg.Wake(v.org + "/" + d.RunnerID)
	c.cfg.Logger.Info("deployment cancel requested from the console", "org", v.org, "deployment", id, "token_id", v.sess.TokenID, "admin", v.sess.Admin)
	http.Redirect(w, r, "/orgs/"+v.org+"/deployments/"+id, http.StatusSeeOther)
	return nil
}

// review approves, discards or applies the saved plan of a plan deployment, as the API does,
// recording the signed-in token as who asked, and goes back to the deployment (the new apply
// deployment, for an apply).
func (c *Console) review(w http.ResponseWriter, r *http.Request, v *visit) error {
	id := r.PathValue("id")
	if api.ValidateID("id", id) != nil {
		return errNotFound
	}
	by := "console: admin"
	if !v.sess.Admin {
		by = "console: org " + v.org + " token " + v.sess.TokenID
	}
	next := id
	var err error
	switch r.PathValue("action") {
	case "approve":
		_, err = c.cfg.Store.ApprovePlan(r.Context(), v.org, id, by)
	case "discard":
		_, err = c.cfg.Store.DiscardPlan(r.Context(), v.org, id, by)
	case "apply":
		var d *api.Deployment
		if d, err = c.cfg.Store.ApplyPlan(r.Context(), v.org, id, by); err == nil {
			c.cfg.Wake(v.org + "/" + d.RunnerID)
			next = d.ID
		}
	default:
		return errNotFound
	}
	if err != nil {
		return err
	}
	c.cfg.Logger.Info("saved plan reviewed from the console", "org", v.org, "deployment", id, "action", r.PathValue("action"), "token_id", v.sess.TokenID, "admin", v.sess.Admin)
	http.Redirect(w, r, "/orgs/"+v.org+"/deployments/"+next, http.StatusSeeOther)
	return nil
}

// rawLog serves the whole stored log as a text file.
func (c *Console) rawLog(w http.ResponseWriter, r *http.Request, v *visit) error {
	id := r.PathValue("id")
	if api.ValidateID("id", id) != nil {
		return errNotFound
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("Content-Disposition", `attachment; filename="`+id+`.log"`)
	var offset int64
	for {
		chunk, err := c.cfg.Store.ReadLogs(r.Context(), v.org, id, offset, 1<<20)
		if err != nil {
			if offset == 0 {
				w.Header().Del("Content-Disposition")
				return err
			}
			return nil // the answer has begun: the download ends short
		}
		if _, err := w.Write(chunk.Data); err != nil {
			return nil //nolint:nilerr // the browser went away
		}
		if len(chunk.Data) == 0 {
			return nil
		}
		offset = chunk.NextOffset
	}
}
