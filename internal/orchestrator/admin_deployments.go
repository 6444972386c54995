package orchestrator

import (
	"context"
	"net/http"
	"strings"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"

	"github.com/outpost-dev/terraform-provider-outpost/internal/api"
	"github.com/outpost-dev/terraform-provider-outpost/internal/orchestrator/store"
	"github.com/outpost-dev/terraform-provider-outpost/internal/tracing"
)

// Log read limits.
const (
	defaultLogRead = 1 << 20
	maxLogRead     = 4 << 20
)

func (s *Server) createDeployment(w http.ResponseWriter, r *http.Request, c *call) error {
	return create(w, r, c, (*api.DeploymentInput).Validate, func(ctx context.Context, in api.DeploymentInput) (*api.Deployment, error) {
		// The root of the deployment's trace: the store keeps its traceparent with the
		// deployment, and the claim hands it to the agent.
		// Untraced (the no-op tracer), the span costs nothing: no attributes are built for it.
		ctx, span := s.tracer.Start(ctx, tracing.SpanEnqueue)
		defer span.End()
		out, err := s.store.CreateDeployment(ctx, c.org, in)
		if span.IsRecording() {
			span.SetAttributes(attribute.String(tracing.AttrOrg, c.org), attribute.String(tracing.AttrRunner, in.RunnerID),
				attribute.String(tracing.AttrOperation, string(in.Operation)))
			if err != nil {
				span.SetStatus(codes.Error, err.Error())
			} else {
				span.SetAttributes(attribute.String(tracing.AttrDeployment, out.ID))
			}
		}
		if err == nil {
			s.notify.Wake(c.org + "/" + in.RunnerID)
		}
		return out, err
	})
}

func (s *Server) listDeployments(w http.ResponseWriter, r *http.Request, c *call) error {
	q := r.URL.Query()
	runnerID, status := q.Get("runner_id"), api.Status(q.Get("status"))
	if runnerID != "" {
		if err := api.ValidateID("runner_id", runnerID); err != nil {
			return err
		}
	}
	if status != "" && !status.Valid() {
		return store.Invalid("status", "%q is not a deployment status; use one of %s", status, statusList())
	}
	list, err := s.store.ListDeployments(r.Context(), c.org, runnerID, status)
	return listed(w, list, err)
}

func (s *Server) getDeployment(w http.ResponseWriter, r *http.Request, c *call) error {
	return read(w, r, func(ctx context.Context, id string) (*api.Deployment, error) {
		return s.store.GetDeployment(ctx, c.org, id)
	})
}

func (s *Server) getLogs(w http.ResponseWriter, r *http.Request, c *call) error {
	id, err := pathID(r)
	if err != nil {
		return err
	}
	offset, err := queryInt(r, "offset", 0)
	if err != nil {
		return err
	}
	limit, err := queryInt(r, "limit", defaultLogRead)
	if err != nil {
		return err
	}
	if limit == 0 || limit > maxLogRead {
		return store.Invalid("limit", "%d is out of range; use 1 to %d bytes", limit, maxLogRead)
	}
	out, err := s.store.ReadLogs(r.Context(), c.org, id, offset, limit)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

func (s *Server) getOutputs(w http.ResponseWriter, r *http.Request, c *call) error {
	return read(w, r, func(ctx context.Context, id string) (api.Outputs, error) {
		return s.store.GetOutputs(ctx, c.org, id)
	})
}

func (s *Server) listEvents(w http.ResponseWriter, r *http.Request, c *call) error {
	return read(w, r, func(ctx context.Context, id string) (api.List[api.Event], error) {
		list, err := s.store.ListEvents(ctx, c.org, id)
		return api.List[api.Event]{Items: list}, err
	})
}

func (s *Server) cancelDeployment(w http.ResponseWriter, r *http.Request, c *call) error {
	return read(w, r, func(ctx context.Context, id string) (*api.Deployment, error) {
		out, err := s.store.CancelDeployment(ctx, c.org, id)
		if err == nil {
			s.notify.Wake(c.org + "/" + out.RunnerID)
		}
		return out, err
	})
}

// statusList names every status, for messages.
func statusList() string {
	names := make([]string, len(api.Statuses))
	for i, st := range api.Statuses {
		names[i] = string(st)
	}
	return strings.Join(names, ", ")
}
