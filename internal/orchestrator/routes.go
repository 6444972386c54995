package orchestrator

import (
	"net/http"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/outpost-dev/terraform-provider-outpost/internal/api"
)

// routeTable is the whole API surface. internal/api/openapi.yaml documents exactly these routes;
// TestOpenAPICoversRoutes fails when the two drift apart.
func (s *Server) routeTable() []route {
	const orgs = "/api/v1/orgs/{org}"
	admin := func(pattern string, body string, limit int64, h func(http.ResponseWriter, *http.Request, *call) error) route {
		return route{pattern: pattern, auth: authAdmin, body: body, limit: limit, h: h}
	}
	bootstrap := func(pattern string, body string, limit int64, h func(http.ResponseWriter, *http.Request, *call) error) route {
		rt := admin(pattern, body, limit, h)
		rt.bootstrap = true
		return rt
	}
	// creating is a route that creates an object, and with it its organisation.
	creating := func(rt route) route {
		rt.newOrg = true
		return rt
	}
	return []route{
		{pattern: "GET /healthz", h: s.handleHealth},
		{pattern: "GET /metrics", h: s.handleMetrics},

		creating(admin("POST "+orgs+"/runners", bodyJSON, limitDefault, s.createRunner)),
		admin("GET "+orgs+"/runners", bodyNone, 0, s.listRunners),
		admin("GET "+orgs+"/runners/{id}", bodyNone, 0, s.getRunner),
		admin("PUT "+orgs+"/runners/{id}", bodyJSON, limitDefault, s.updateRunner),
		admin("DELETE "+orgs+"/runners/{id}", bodyNone, 0, s.deleteRunner),

		creating(admin("POST "+orgs+"/state-storages", bodyJSON, limitDefault, s.createStorage)),
		admin("GET "+orgs+"/state-storages", bodyNone, 0, s.listStorages),
		admin("GET "+orgs+"/state-storages/{id}", bodyNone, 0, s.getStorage),
		admin("PUT "+orgs+"/state-storages/{id}", bodyJSON, limitDefault, s.updateStorage),
		admin("DELETE "+orgs+"/state-storages/{id}", bodyNone, 0, s.deleteStorage),
		admin("GET "+orgs+"/state-storages/{id}/states", bodyNone, 0, s.listStates),
		admin("GET "+orgs+"/state-storages/{id}/states/{key...}", bodyNone, 0, s.getState),
		admin("POST "+orgs+"/state-storages/{id}/operations", bodyJSON, limitDefault, s.createStateOperation),
		admin("GET "+orgs+"/state-storages/{id}/operations", bodyNone, 0, s.listStateOperations),
		admin("GET "+orgs+"/state-operations/{id}", bodyNone, 0, s.getStateOperation),

		creating(admin("POST "+orgs+"/deployments", bodyJSON, limitDeployment, s.createDeployment)),
		admin("GET "+orgs+"/deployments", bodyNone, 0, s.listDeployments),
		admin("GET "+orgs+"/deployments/{id}", bodyNone, 0, s.getDeployment),
		admin("GET "+orgs+"/deployments/{id}/logs", bodyNone, 0, s.getLogs),
		admin("GET "+orgs+"/deployments/{id}/outputs", bodyNone, 0, s.getOutputs),
		admin("GET "+orgs+"/deployments/{id}/events", bodyNone, 0, s.listEvents),
		admin("POST "+orgs+"/deployments/{id}/cancel", bodyNone, 0, s.cancelDeployment),
		admin("GET "+orgs+"/deployments/{id}/plan", bodyNone, 0, s.getPlan),
		admin("POST "+orgs+"/deployments/{id}/approve", bodyNone, 0, s.approvePlan),
		admin("POST "+orgs+"/deployments/{id}/discard", bodyNone, 0, s.discardPlan),
		admin("POST "+orgs+"/deployments/{id}/apply", bodyNone, 0, s.applyPlan),

		creating(admin("POST "+orgs+"/schedules", bodyJSON, limitDeployment, s.createSchedule)),
		admin("GET "+orgs+"/schedules", bodyNone, 0, s.listSchedules),
		admin("GET "+orgs+"/schedules/{id}", bodyNone, 0, s.getSchedule),
		admin("PUT "+orgs+"/schedules/{id}", bodyJSON, limitDeployment, s.updateSchedule),
		admin("DELETE "+orgs+"/schedules/{id}", bodyNone, 0, s.deleteSchedule),

		creating(bootstrap("POST "+orgs+"/tokens", bodyJSON, limitDefault, s.createOrgToken)),
		bootstrap("GET "+orgs+"/tokens", bodyNone, 0, s.listOrgTokens),
		bootstrap("DELETE "+orgs+"/tokens/{id}", bodyNone, 0, s.revokeOrgToken),

		{pattern: "POST /api/v1/agent/poll", auth: authAgent, body: bodyJSON, limit: limitDefault, h: s.poll},
		{pattern: "POST /api/v1/agent/deployments/{id}/claim", auth: authAgent, body: bodyJSON, limit: limitDefault, h: s.claim, replayInTx: true},
		{pattern: "POST /api/v1/agent/deployments/{id}/events", auth: authAgent, body: bodyJSON, limit: limitDefault, h: s.event},
		{pattern: "POST /api/v1/agent/events", auth: authAgent, body: bodyJSON, limit: limitEventBatch, h: s.events},
		{pattern: "POST /api/v1/agent/states", auth: authAgent, body: bodyJSON, limit: limitStateReport, h: s.reportStates},
		{pattern: "POST /api/v1/agent/state-operations/{id}/result", auth: authAgent, body: bodyJSON, limit: limitStateReport, h: s.stateOperationResult},

		{pattern: "GET /api/v1/job/spec", auth: authJob, h: s.jobSpec},
		{pattern: "POST /api/v1/job/logs", auth: authJob, body: bodyOctet, limit: limitLogAppend, h: s.appendLog},
		{pattern: "PUT /api/v1/job/outputs", auth: authJob, body: bodyJSON, limit: api.MaxOutputsBytes, h: s.putOutputs},
		{pattern: "PUT /api/v1/job/drift", auth: authJob, body: bodyJSON, limit: api.MaxOutputsBytes, h: s.putDrift},
		{pattern: "PUT /api/v1/job/plan-summary", auth: authJob, body: bodyJSON, limit: api.MaxPlanSummaryBytes, h: s.putPlanSummary},
	}
}

// handleHealth answers 200 while the database answers, so a supervisor restarts an orchestrator
// whose storage broke.
func (s *Server) handleHealth(w http.ResponseWriter, r *http.Request, _ *call) error {
	if _, err := s.store.StatusCounts(r.Context()); err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	return nil
}

func (s *Server) handleMetrics(w http.ResponseWriter, r *http.Request, _ *call) error {
	promhttp.HandlerFor(s.metrics.registry, promhttp.HandlerOpts{}).ServeHTTP(w, r)
	return nil
}
