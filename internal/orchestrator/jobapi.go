package orchestrator

import (
	"net/http"
	"regexp"
	"strconv"

	"github.com/outpost-dev/terraform-provider-outpost/internal/api"
	"github.com/outpost-dev/terraform-provider-outpost/internal/orchestrator/store"
)

// outputName is an HCL identifier, as Terraform and OpenTofu take output names: a Unicode
// letter or '_', then letters, digits, combining marks, connector punctuation or '-' (output
// "größe" is valid, and refusing its upload would fail a deployment after its apply).
var outputName = regexp.MustCompile(`^[\p{L}\p{Nl}_][\p{L}\p{Nl}\p{Mn}\p{Mc}\p{Nd}\p{Pc}-]*$`)

func (s *Server) jobSpec(w http.ResponseWriter, r *http.Request, c *call) error {
	out, err := s.store.JobSpec(r.Context(), c.job, s.cfg.JobTokenGrace)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// appendLog takes raw log bytes at ?offset=N (the writer's byte offset of the body's first byte).
func (s *Server) appendLog(w http.ResponseWriter, r *http.Request, c *call) error {
	raw := r.URL.Query().Get(api.LogOffsetParam)
	if raw == "" {
		return store.Invalid(api.LogOffsetParam, "is required: the byte offset of the body's first byte in this run's log")
	}
	offset, err := strconv.ParseInt(raw, 10, 64)
	if err != nil || offset < 0 {
		return store.Invalid(api.LogOffsetParam, "%q is not a non-negative integer", raw)
	}
	out, err := s.store.AppendLog(r.Context(), c.job, offset, c.body, s.cfg.JobTokenGrace)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// putOutputs stores the outputs of a deployment. Over api.MaxOutputs (a job runner of a release
// that did not cap them) the rest is left out rather than refused: the apply already ran, and
// the deployment must not fail over what it reports. ?omitted=N counts what the job runner
// itself left out.
func (s *Server) putOutputs(w http.ResponseWriter, r *http.Request, c *call) error {
	var outputs api.Outputs
	if err := decodeJSON(c.body, &outputs); err != nil {
		return err
	}
	if outputs == nil {
		return store.Invalid("", "outputs must be a JSON object of name → {value, type, sensitive}")
	}
	omitted := 0
	if raw := r.URL.Query().Get(api.OutputsOmittedParam); raw != "" {
		n, err := strconv.Atoi(raw)
		if err != nil || n < 0 {
			return store.Invalid(api.OutputsOmittedParam, "%q is not a non-negative integer", raw)
		}
		omitted = n
	}
	for name, o := range outputs {
		if !outputName.MatchString(name) {
			return store.Invalid(name, "is not a valid Terraform output name")
		}
		if len(o.Value) == 0 {
			return store.Invalid(name+".value", "is required (as `terraform output -json` prints it)")
		}
	}
	if len(outputs) > api.MaxOutputs {
		var dropped []string
		outputs, dropped = outputs.Cap(api.MaxOutputs, api.MaxOutputsBytes)
		omitted += len(dropped)
	}
	if err := s.store.PutOutputs(r.Context(), c.job, outputs, omitted, s.cfg.JobTokenGrace); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}
