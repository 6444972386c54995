package metrics

import "testing"

func TestEndpoint(t *testing.T) {
	for path, want := range map[string]string{
		"/api/v1/agent/poll":                "poll",
		"/api/v1/agent/deployments/x/claim": "claim", "/api/v1/agent/deployments/x/events": "events", "/api/v1/orgs/a/runners": "other",
	} {
		if got := Endpoint(path); got != want {
			t.Errorf("Endpoint(%s) = %s, want %s", path, got, want)
		}
	}
}
