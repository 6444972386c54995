package client

import (
	"context"
	"net/http"
	"net/url"
	"strconv"

	"github.com/outpost-dev/terraform-provider-outpost/internal/api"
	"github.com/outpost-dev/terraform-provider-outpost/internal/retry"
)

// JobClient calls the job API (/api/v1/job/) for the job runner of one attempt, authenticated by
// its job token.
type JobClient struct {
	t *transport
}

// NewJobClient returns a client for the attempt the job token was granted for.
func NewJobClient(baseURL, token string, opts ...Option) (*JobClient, error) {
	t, err := newTransport(baseURL, bearer(token), opts)
	if err != nil {
		return nil, err
	}
	return &JobClient{t: t}, nil
}

// Spec fetches the attempt's job spec.
func (c *JobClient) Spec(ctx context.Context) (*api.JobSpec, error) {
	return roundTrip[api.JobSpec](ctx, c.t, call{method: http.MethodGet, path: "/api/v1/job/spec", retryable: retry.Idempotent}, nil)
}

// AppendLog appends data at offset. A wrong offset returns an error matching api.ErrOffsetMismatch
// whose *api.Error carries the server's CommittedOffset, so the caller can resume from there.
func (c *JobClient) AppendLog(ctx context.Context, offset int64, data []byte) (*api.LogAppendResponse, error) {
	var out api.LogAppendResponse
	err := c.t.do(ctx, call{
		method: http.MethodPost, path: "/api/v1/job/logs",
		query: url.Values{api.LogOffsetParam: {strconv.FormatInt(offset, 10)}},
		body:  data, contentType: "application/octet-stream", retryable: retry.Idempotent, out: &out,
	})
	if err != nil {
		return nil, err
	}
	return &out, nil
}

// PutOutputs uploads the deployment's Terraform outputs, saying how many were left out of them
// to keep within api.MaxOutputs and api.MaxOutputsBytes (api.Outputs.Cap).
func (c *JobClient) PutOutputs(ctx context.Context, outputs api.Outputs, omitted int) error {
	body, err := jsonBody(outputs)
	if err != nil {
		return err
	}
	cl := call{method: http.MethodPut, path: "/api/v1/job/outputs", body: body, retryable: retry.Idempotent}
	if omitted > 0 {
		cl.query = url.Values{api.OutputsOmittedParam: {strconv.Itoa(omitted)}}
	}
	return c.t.do(ctx, cl)
}

// PutPlanSummary uploads the summary of the deployment's saved plan (names only, never a value).
func (c *JobClient) PutPlanSummary(ctx context.Context, sum api.PlanSummary) error {
	body, err := jsonBody(sum)
	if err != nil {
		return err
	}
	return c.t.do(ctx, call{method: http.MethodPut, path: "/api/v1/job/plan-summary", body: body, retryable: retry.Idempotent})
}
