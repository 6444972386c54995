package statebackend

// Plan files of saved plans, beside their state: the job runner of a plan with save_plan stores
// its plan file here (PUT), the job runner of the apply of that plan reads it (GET) and deletes
// it once applied (DELETE). Only these two may touch it (jobtoken.Access.Plan), and the file
// never leaves the cluster otherwise.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"time"

	"github.com/outpost-dev/terraform-provider-outpost/agent/internal/jobtoken"
	"github.com/outpost-dev/terraform-provider-outpost/agent/internal/statestore"
	"github.com/outpost-dev/terraform-provider-outpost/internal/api"
)

// PlanPathPrefix is where the handler serves the plan file of a state: PlanPathPrefix +
// url.PathEscape(key). Which plan is the caller's to use is decided by its grant.
const PlanPathPrefix = "/v1/plans/"

// PlanSweepEvery is how often the lock sweep also deletes expired plan files.
const PlanSweepEvery = time.Minute

// plan serves GET, PUT and DELETE of the plan file the caller's grant names.
func (h *Handler) plan(w http.ResponseWriter, r *http.Request, key string, access jobtoken.Access) {
	if access.Plan == "" {
		writeError(w, http.StatusForbidden, "no_plan", fmt.Sprintf("this attempt has no saved plan of state %q to use", key))
		return
	}
	switch r.Method {
	case http.MethodPut:
		if !access.PlanStore {
			writeError(w, http.StatusForbidden, "read_only", "only the plan that made a plan file stores it")
			return
		}
		data, err := io.ReadAll(http.MaxBytesReader(w, r.Body, statestore.MaxPlanSize))
		if err != nil {
			writeError(w, http.StatusRequestEntityTooLarge, "too_large", fmt.Sprintf("a plan file of at most %d bytes: %v", statestore.MaxPlanSize, err))
			return
		}
		ttl := access.PlanTTL
		if ttl <= 0 {
			ttl = api.DefaultPlanTTLSeconds * time.Second
		}
		expires := time.Now().Add(ttl)
		if err := h.store.PutPlan(r.Context(), key, access.Plan, data, expires); err != nil {
			h.planError(w, r, key, access.Plan, "store", err)
			return
		}
		h.log.LogAttrs(r.Context(), slog.LevelInfo, "plan file stored", slog.String("state_key", key), slog.String("plan", access.Plan),
			slog.Int("bytes", len(data)), slog.Time("expires", expires))
		w.Header().Set("X-Outpost-Plan-Expires", expires.UTC().Format(time.RFC3339))
		w.WriteHeader(http.StatusOK)
	case http.MethodGet:
		if access.PlanStore {
			writeError(w, http.StatusForbidden, "write_only", "a plan stores its plan file; only the apply of the approved plan reads it")
			return
		}
		data, err := h.store.GetPlan(r.Context(), key, access.Plan, time.Now())
		if err != nil {
			h.planError(w, r, key, access.Plan, "read", err)
			return
		}
		w.Header().Set("Content-Type", "application/octet-stream")
		w.Header().Set("Content-Length", strconv.Itoa(len(data)))
		_, _ = w.Write(data)
	case http.MethodDelete:
		if err := h.store.DeletePlan(r.Context(), key, access.Plan); err != nil {
			h.planError(w, r, key, access.Plan, "delete", err)
			return
		}
		w.WriteHeader(http.StatusOK)
	default:
		w.Header().Set("Allow", "GET, PUT, DELETE")
		writeError(w, http.StatusMethodNotAllowed, "method_not_allowed", "method "+r.Method+" not supported on plan files")
	}
}

func (h *Handler) planError(w http.ResponseWriter, r *http.Request, key, plan, what string, err error) {
	switch {
	case errors.Is(err, statestore.ErrPlanNotFound):
		writeError(w, http.StatusNotFound, "plan_not_found", err.Error())
	case errors.Is(err, statestore.ErrTooLarge):
		writeError(w, http.StatusRequestEntityTooLarge, "too_large", err.Error())
	default:
		h.log.LogAttrs(r.Context(), slog.LevelError, "plan file "+what+" failed", slog.String("state_key", key), slog.String("plan", plan), slog.Any("err", err))
		writeError(w, http.StatusServiceUnavailable, "store_unavailable", fmt.Sprintf("could not %s the plan file: %v; retry", what, err))
	}
}

// PlanCheckError says why the saved plan an apply runs cannot be applied: its Reason is
// api.ReasonStalePlan or api.ReasonPlanExpired.
type PlanCheckError struct {
	Reason api.Reason
	Detail string
}

func (e *PlanCheckError) Error() string { return e.Detail }

// RefusalReason is the reason the claim is refused with.
func (e *PlanCheckError) RefusalReason() api.Reason { return e.Reason }

// CheckPlan tells, before the agent creates anything for an apply of a saved plan, whether the
// plan can still be applied: its plan file is kept and has not expired, and the state is still
// the one the plan was made against (ref's lineage and serial; a state that did not exist then
// must not exist now). A *PlanCheckError says why not; other errors are the cluster's.
func (s *Server) CheckPlan(ctx context.Context, ns, key string, ref api.PlanRef) error {
	if !s.serves(ns) {
		return fmt.Errorf("the runner's state storage names namespace %q, but this agent keeps states only in %q (--state-namespace)", ns, s.o.FallbackNamespace)
	}
	h, err := s.handler(ns)
	if err != nil {
		return err
	}
	if _, err := h.store.GetPlan(ctx, key, ref.DeploymentID, time.Now()); errors.Is(err, statestore.ErrPlanNotFound) {
		return &PlanCheckError{Reason: api.ReasonPlanExpired, Detail: err.Error()}
	} else if err != nil {
		return err
	}
	cur, err := h.store.Current(ctx, key)
	switch {
	case errors.Is(err, statestore.ErrNotFound):
		// The plan was made against no state (its lineage is one the CLI made up for the
		// state it would write): nothing moved unless a state appeared, and none did.
		return nil
	case err != nil:
		return err
	case cur.Lineage != ref.Lineage || cur.Serial != ref.Serial:
		return &PlanCheckError{Reason: api.ReasonStalePlan, Detail: fmt.Sprintf(
			"the state %q moved since the plan of deployment %s was made: it is at serial %d of lineage %q, the plan was made at serial %d of lineage %q; queue a new plan",
			key, ref.DeploymentID, cur.Serial, cur.Lineage, ref.Serial, ref.Lineage)}
	}
	return nil
}

// sweepPlans deletes the expired plan files of the handler's namespace.
func (h *Handler) sweepPlans(ctx context.Context) {
	n, err := h.store.SweepPlans(ctx, time.Now())
	switch {
	case err != nil:
		h.log.LogAttrs(ctx, slog.LevelWarn, "sweep of expired plan files failed", slog.Any("err", err))
	case n > 0:
		h.log.LogAttrs(ctx, slog.LevelInfo, "expired plan files deleted", slog.Int("chunks", n))
	}
}
