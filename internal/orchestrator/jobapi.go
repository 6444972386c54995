package orchestrator

import (
	"net/http"
	"regexp"
	"strconv"

	"github.com/outpost-dev/terraform-provider-outpost/internal/api"
)

// Limits of uploaded outputs.
const maxOutputs = 1000

var outputName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_-]*$`)

func (s *Server) jobSpec(w http.ResponseWriter, r *http.Request, c *call) error {
	out, err := s.store.jobSpec(r.Context(), c.job, s.cfg.JobTokenGrace)
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
		return invalid(api.LogOffsetParam, "is required: the byte offset of the body's first byte in this run's log")
	}
	offset, err := strconv.ParseInt(raw, 10, 64)
	if err != nil || offset < 0 {
		return invalid(api.LogOffsetParam, "%q is not a non-negative integer", raw)
	}
	out, err := s.store.appendLog(r.Context(), c.job, offset, c.body, s.cfg.JobTokenGrace)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

func (s *Server) putOutputs(w http.ResponseWriter, r *http.Request, c *call) error {
	var outputs api.Outputs
	if err := decodeJSON(c.body, &outputs); err != nil {
		return err
	}
	if outputs == nil {
		return invalid("", "outputs must be a JSON object of name → {value, type, sensitive}")
	}
	if len(outputs) > maxOutputs {
		return invalid("", "%d outputs; at most %d", len(outputs), maxOutputs)
	}
	for name, o := range outputs {
		if !outputName.MatchString(name) {
			return invalid(name, "is not a valid Terraform output name")
		}
		if len(o.Value) == 0 {
			return invalid(name+".value", "is required (as `terraform output -json` prints it)")
		}
	}
	if err := s.store.putOutputs(r.Context(), c.job, outputs, s.cfg.JobTokenGrace); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}
