package orchestrator

import (
	"encoding/json"
	"os"
	"reflect"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/outpost-dev/terraform-provider-outpost/internal/api"
)

const openAPIPath = "../api/openapi.yaml"

type oaParam struct {
	Ref      string `json:"$ref"`
	Name     string `json:"name"`
	In       string `json:"in"`
	Required bool   `json:"required"`
}

type oaOperation struct {
	OperationID string                            `json:"operationId"`
	Security    *[]map[string][]string            `json:"security"`
	Parameters  []oaParam                         `json:"parameters"`
	RequestBody *struct{ Content map[string]any } `json:"requestBody"`
	Responses   map[string]json.RawMessage        `json:"responses"`
}

type oaSchema struct {
	Type       string                     `json:"type"`
	Properties map[string]json.RawMessage `json:"properties"`
	Required   []string                   `json:"required"`
}

type oaDoc struct {
	OpenAPI    string                                `json:"openapi"`
	Paths      map[string]map[string]json.RawMessage `json:"paths"`
	Components struct {
		Schemas         map[string]oaSchema `json:"schemas"`
		Parameters      map[string]oaParam  `json:"parameters"`
		SecuritySchemes map[string]any      `json:"securitySchemes"`
	} `json:"components"`
}

func loadOpenAPI(t *testing.T) (oaDoc, any) {
	t.Helper()
	raw, err := os.ReadFile(openAPIPath)
	if err != nil {
		t.Fatal(err)
	}
	js, err := yaml.YAMLToJSON(raw)
	if err != nil {
		t.Fatalf("%s is not valid YAML: %v", openAPIPath, err)
	}
	var doc oaDoc
	if err := json.Unmarshal(js, &doc); err != nil {
		t.Fatalf("%s does not have the OpenAPI shape: %v", openAPIPath, err)
	}
	var tree any
	_ = json.Unmarshal(js, &tree)
	return doc, tree
}

var pathParam = regexp.MustCompile(`\{([a-z_]+)\}`)

// TestOpenAPICoversRoutes keeps the document and the server in step: the same routes, each
// with its security scheme, path parameters, request body kind and responses.
func TestOpenAPICoversRoutes(t *testing.T) {
	t.Parallel()
	doc, tree := loadOpenAPI(t)
	if !strings.HasPrefix(doc.OpenAPI, "3.0.") {
		t.Fatalf("openapi %q, want 3.0.x", doc.OpenAPI)
	}
	h := newHarness(t)
	served := map[string]route{}
	for _, rt := range h.srv.routes {
		// OpenAPI has no "rest of the path" parameter: {key...} is documented as {key}.
		served[strings.ReplaceAll(rt.pattern, "...}", "}")] = rt
	}

	documented := map[string]bool{}
	opIDs := map[string]string{}
	for path, item := range doc.Paths {
		var shared []oaParam
		if raw, ok := item["parameters"]; ok {
			if err := json.Unmarshal(raw, &shared); err != nil {
				t.Fatalf("%s parameters: %v", path, err)
			}
		}
		for method, raw := range item {
			if method == "parameters" {
				continue
			}
			pattern := strings.ToUpper(method) + " " + path
			documented[pattern] = true
			var op oaOperation
			if err := json.Unmarshal(raw, &op); err != nil {
				t.Fatalf("%s: %v", pattern, err)
			}
			rt, ok := served[pattern]
			if !ok {
				t.Errorf("%s is documented but the server has no such route", pattern)
				continue
			}
			checkOperation(t, doc, pattern, rt, op, append(shared, op.Parameters...))
			if prev, dup := opIDs[op.OperationID]; dup {
				t.Errorf("operationId %q used by %s and %s", op.OperationID, prev, pattern)
			}
			opIDs[op.OperationID] = pattern
		}
	}
	for pattern := range served {
		if !documented[pattern] {
			t.Errorf("route %s is served but not documented in %s", pattern, openAPIPath)
		}
	}
	checkRefs(t, doc, tree)
}

func checkOperation(t *testing.T, doc oaDoc, pattern string, rt route, op oaOperation, params []oaParam) {
	t.Helper()
	if op.OperationID == "" {
		t.Errorf("%s has no operationId", pattern)
	}
	wantScheme := map[authKind]string{authAdmin: "adminToken", authAgent: "agentJWT", authJob: "jobToken"}[rt.auth]
	switch {
	case op.Security == nil:
		t.Errorf("%s declares no security (use [] for none)", pattern)
	case wantScheme == "" && len(*op.Security) != 0:
		t.Errorf("%s is served without credentials but documents %v", pattern, *op.Security)
	case wantScheme != "" && (len(*op.Security) != 1 || (*op.Security)[0][wantScheme] == nil):
		t.Errorf("%s security %v, want %s", pattern, *op.Security, wantScheme)
	}
	if wantScheme != "" && op.Responses["401"] == nil {
		t.Errorf("%s does not document its 401", pattern)
	}
	if rt.bootstrap && op.Responses["403"] == nil {
		t.Errorf("%s is for the bootstrap admin token only but does not document the 403 of an organisation token", pattern)
	}
	ok2xx := false
	for code := range op.Responses {
		ok2xx = ok2xx || strings.HasPrefix(code, "2")
	}
	if !ok2xx {
		t.Errorf("%s documents no success response", pattern)
	}
	switch {
	case rt.body == bodyNone && op.RequestBody != nil:
		t.Errorf("%s takes no body but documents one", pattern)
	case rt.body != bodyNone && (op.RequestBody == nil || op.RequestBody.Content[rt.body] == nil):
		t.Errorf("%s takes %s but the document does not say so", pattern, rt.body)
	case rt.body != bodyNone && op.Responses["413"] == nil:
		t.Errorf("%s does not document its 413", pattern)
	}
	declared := map[string]bool{}
	for _, p := range params {
		if name, ok := strings.CutPrefix(p.Ref, "#/components/parameters/"); ok {
			p = doc.Components.Parameters[name]
		}
		if p.In == "path" {
			if !p.Required {
				t.Errorf("%s: path parameter %s must be required", pattern, p.Name)
			}
			declared[p.Name] = true
		}
	}
	for _, m := range pathParam.FindAllStringSubmatch(pattern, -1) {
		if !declared[m[1]] {
			t.Errorf("%s: path parameter {%s} is not declared", pattern, m[1])
		}
		delete(declared, m[1])
	}
	for name := range declared {
		t.Errorf("%s declares path parameter %s that the path does not have", pattern, name)
	}
}

// checkRefs resolves every $ref in the document.
func checkRefs(t *testing.T, doc oaDoc, tree any) {
	t.Helper()
	var walk func(v any)
	walk = func(v any) {
		switch x := v.(type) {
		case map[string]any:
			if ref, ok := x["$ref"].(string); ok {
				parts := strings.Split(strings.TrimPrefix(ref, "#/components/"), "/")
				found := len(parts) == 2 && map[string]bool{
					"schemas":         doc.Components.Schemas[parts[1]].Type != "" || doc.Components.Schemas[parts[1]].Properties != nil,
					"parameters":      doc.Components.Parameters[parts[1]].Name != "",
					"securitySchemes": doc.Components.SecuritySchemes[parts[1]] != nil,
					"responses":       componentExists(tree, "responses", parts[1]),
				}[parts[0]]
				if !found {
					t.Errorf("$ref %q does not resolve", ref)
				}
			}
			for _, e := range x {
				walk(e)
			}
		case []any:
			for _, e := range x {
				walk(e)
			}
		}
	}
	walk(tree)
}

func componentExists(tree any, kind, name string) bool {
	root, _ := tree.(map[string]any)
	comps, _ := root["components"].(map[string]any)
	group, _ := comps[kind].(map[string]any)
	return group[name] != nil
}

// goSchemas maps the document's object schemas to the Go wire types they describe.
var goSchemas = map[string]any{
	"ErrorBody": api.ErrorBody{}, "ErrorDetail": api.ErrorDetail{}, "ProtocolRange": api.ProtocolRange{},
	"Runner": api.Runner{}, "RunnerJob": api.RunnerJob{}, "RunnerStatus": api.RunnerStatus{}, "RunnerRefusal": api.RunnerRefusal{}, "RetiringKey": api.RetiringKey{},
	"RunnerInput": api.RunnerInput{}, "RunnerList": api.List[api.Runner]{},
	"StateStorage": api.StateStorage{}, "KubernetesStateSpec": api.KubernetesStateSpec{}, "S3StateSpec": api.S3StateSpec{},
	"GCSStateSpec": api.GCSStateSpec{}, "AzureRMStateSpec": api.AzureRMStateSpec{},
	"StateStorageInput": api.StateStorageInput{}, "StateStorageList": api.List[api.StateStorage]{},
	"StateVersion": api.StateVersion{}, "StateLock": api.StateLock{}, "StateReport": api.StateReport{}, "StateLockBreak": api.StateLockBreak{},
	"State": api.State{}, "StateList": api.List[api.State]{},
	"SavedPlan": api.SavedPlan{}, "PlanRef": api.PlanRef{}, "PlanSummary": api.PlanSummary{}, "PlanCounts": api.PlanCounts{},
	"ResourceChange": api.ResourceChange{}, "OutputChange": api.OutputChange{},
	"Source": api.Source{}, "InlineSource": api.InlineSource{}, "GitSource": api.GitSource{},
	"StateOperationRequest": api.StateOperationRequest{}, "StateOperation": api.StateOperation{}, "StateOperationList": api.List[api.StateOperation]{},
	"StateOperationError": api.StateOperationError{}, "StateContents": api.StateContents{}, "StateOutputName": api.StateOutputName{},
	"StateDiff": api.StateDiff{}, "StateRolledBack": api.StateRolledBack{}, "StateOperationOffer": api.StateOperationOffer{},
	"StateOperationResult": api.StateOperationResult{},
	"DeploymentInput":      api.DeploymentInput{}, "Deployment": api.Deployment{}, "DeploymentList": api.List[api.Deployment]{},
	"Output": api.Output{}, "Event": api.Event{}, "EventList": api.List[api.Event]{}, "LogChunk": api.LogChunk{},
	"PollRequest": api.PollRequest{}, "HeldAttempt": api.HeldAttempt{}, "PollResponse": api.PollResponse{},
	"Offer": api.Offer{}, "Directive": api.Directive{}, "ClaimRequest": api.ClaimRequest{}, "Lease": api.Lease{},
	"Claim": api.Claim{}, "Placement": api.Placement{}, "JobSpec": api.JobSpec{}, "EventRequest": api.EventRequest{},
	"EventResponse": api.EventResponse{}, "LogAppendResponse": api.LogAppendResponse{},
	"EventBatch": api.EventBatch{}, "DeploymentEvent": api.DeploymentEvent{}, "EventBatchResponse": api.EventBatchResponse{},
	"EventResult": api.EventResult{}, "EventRefusal": api.EventRefusal{},
	"OrgToken": api.OrgToken{}, "OrgTokenInput": api.OrgTokenInput{}, "CreatedOrgToken": api.CreatedOrgToken{},
	"OrgTokenList": api.List[api.OrgToken]{},
	"JobPod":       api.JobPod{}, "JobResources": api.JobResources{}, "JobToleration": api.JobToleration{},
	"JobEnvVar": api.JobEnvVar{}, "JobKeyRef": api.JobKeyRef{}, "JobVolumeMount": api.JobVolumeMount{},
	"ScheduleInput": api.ScheduleInput{}, "Schedule": api.Schedule{}, "ScheduleList": api.List[api.Schedule]{},
	"Drift": api.Drift{}, "DriftReport": api.DriftReport{},
}

// Schemas without properties of a Go struct: maps, enums and the tiny ops bodies.
var nonStructSchemas = map[string]bool{
	"Health": true, "Outputs": true, "Variables": true, "StateStorageType": true,
	"Operation": true, "StateOperationKind": true, "StateOperationStatus": true, "DeploymentStatus": true, "EventType": true, "DirectiveType": true, "Step": true, "Reason": true,
	"OnDrift": true, "PlanAction": true,
}

func TestOpenAPISchemasMatchWireTypes(t *testing.T) {
	t.Parallel()
	doc, _ := loadOpenAPI(t)
	for name, s := range doc.Components.Schemas {
		goVal, ok := goSchemas[name]
		if !ok {
			if !nonStructSchemas[name] {
				t.Errorf("schema %s maps to no Go type; add it to goSchemas", name)
			}
			continue
		}
		want := jsonFieldNames(reflect.TypeOf(goVal))
		got := sortedKeys(s.Properties)
		if !slices.Equal(got, want) {
			t.Errorf("schema %s properties %v, Go type %T has JSON fields %v", name, got, goVal, want)
		}
		for _, r := range s.Required {
			if s.Properties[r] == nil {
				t.Errorf("schema %s requires %s, which it does not define", name, r)
			}
		}
	}
	for name := range goSchemas {
		if _, ok := doc.Components.Schemas[name]; !ok {
			t.Errorf("schema %s is missing from the document", name)
		}
	}
}

func jsonFieldNames(t reflect.Type) []string {
	var out []string
	for i := range t.NumField() {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "-" || !f.IsExported() {
			continue
		}
		if f.Anonymous && name == "" && f.Type.Kind() == reflect.Struct {
			out = append(out, jsonFieldNames(f.Type)...) // encoding/json flattens embedded structs
			continue
		}
		if name == "" {
			name = f.Name
		}
		out = append(out, name)
	}
	sort.Strings(out)
	return out
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
