package client_test

import (
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/outpost-dev/terraform-provider-outpost/internal/agentauth"
	"github.com/outpost-dev/terraform-provider-outpost/internal/api"
	"github.com/outpost-dev/terraform-provider-outpost/internal/client"
	"github.com/outpost-dev/terraform-provider-outpost/internal/keys"
)

// During a rolling upgrade of the orchestrator, the poll is answered by a new replica (agent
// protocol 3) and the attempt's events reach an old one, which decodes them strictly and refuses
// the timeline's fields. The finished event still arrives, in the older shape, its detail folded
// into the message. Seen in make test's rolling upgrade: two deployments never finished, their
// agents waiting for a directive after the refusal.
func TestEventsReachAnOlderReplicaDuringAnUpgrade(t *testing.T) {
	var mu sync.Mutex
	var accepted []api.Event
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		w.Header().Set("Content-Type", "application/json")
		switch {
		case strings.HasSuffix(r.URL.Path, "/agent/poll"): // a new replica
			_ = json.NewEncoder(w).Encode(api.PollResponse{Protocol: api.ProtocolTimeline, MaxConcurrency: 1, OrchestratorVersion: "new"})
		case strings.HasSuffix(r.URL.Path, "/events"): // an old replica: no step, node or detail
			var probe map[string]any
			_ = json.Unmarshal(body, &probe)
			for _, f := range []string{"step", "node", "detail"} {
				if _, ok := probe[f]; ok {
					w.WriteHeader(http.StatusBadRequest)
					_, _ = w.Write([]byte(`{"error":{"code":"invalid_argument","message":"json: unknown field \"` + f + `\""}}`))
					return
				}
			}
			var req api.EventRequest
			if err := json.Unmarshal(body, &req); err != nil {
				t.Errorf("undecodable event: %v", err)
			}
			mu.Lock()
			accepted = append(accepted, req.Event)
			mu.Unlock()
			_, _ = w.Write([]byte(`{}`))
		default:
			http.NotFound(w, r)
		}
	}))
	defer srv.Close()
	ac := plainAgentClient(t, srv.URL)
	if _, err := ac.Poll(t.Context(), api.PollRequest{AgentVersion: "test", Instance: "i", Held: []api.HeldAttempt{}}); err != nil {
		t.Fatal(err)
	}
	fin := api.Event{Attempt: 1, Seq: 2, Type: api.EventFinished, Result: api.StatusFailed, Step: api.StepFinished,
		Reason: "image_pull", Message: "the Job's pod did not start", Detail: "ErrImagePull: not found"}
	if _, err := ac.Event(t.Context(), "dep-a", api.EventRequest{Fencing: 1, Event: fin}); err != nil {
		t.Fatalf("the finished event was refused: %v", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(accepted) != 1 || accepted[0].Type != api.EventFinished || !strings.Contains(accepted[0].Message, "ErrImagePull: not found") {
		t.Fatalf("accepted %+v, want the finished event with its detail in the message", accepted)
	}
}

// A batch of events that reaches a replica of a release before agent protocol 6 finds no route
// there: Events says so with ErrEventBatchUnsupported, so the agent sends the events one by one.
func TestEventBatchReachesAnOlderReplica(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusNotFound)
		_, _ = w.Write([]byte(`{"error":{"code":"not_found","message":"no route POST ` + r.URL.Path + `"}}`))
	}))
	defer srv.Close()
	ac := plainAgentClient(t, srv.URL)
	_, err := ac.Events(t.Context(), []api.DeploymentEvent{{DeploymentID: "dep-a", EventRequest: api.EventRequest{Fencing: 1, Event: api.Event{Attempt: 1, Seq: 1, Type: api.EventStarted}}}})
	if !errors.Is(err, api.ErrEventBatchUnsupported) {
		t.Fatalf("a batch to a replica without the route: %v, want ErrEventBatchUnsupported", err)
	}
}

// plainAgentClient is an agent client of a fresh key for a test server on plain HTTP.
func plainAgentClient(t *testing.T, url string) *client.AgentClient {
	t.Helper()
	_, key, err := keys.Generate()
	if err != nil {
		t.Fatal(err)
	}
	ac, err := client.NewAgentClient(url, agentauth.NewSigner("acme", "r1", key), client.AllowInsecureHTTP())
	if err != nil {
		t.Fatal(err)
	}
	return ac
}
