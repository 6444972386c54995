package orchestrator

import (
	"context"
	"encoding/json"
	"net/http"

	"github.com/outpost-dev/terraform-provider-outpost/internal/api"
	"github.com/outpost-dev/terraform-provider-outpost/internal/orchestrator/store"
)

// The shapes the handlers share: decode and check the input, let the store act, answer with the
// result as JSON. Each handler states only what differs: its checks, its store call, whom to
// wake.

// create answers a create (POST): the JSON body decoded into In and checked with validate, then
// stored; 201 with what save returns.
func create[In, Out any](w http.ResponseWriter, r *http.Request, c *call, validate func(*In) error, save func(context.Context, In) (Out, error)) error {
	var in In
	if err := decodeJSON(c.body, &in); err != nil {
		return err
	}
	if err := validate(&in); err != nil {
		return err
	}
	return reply(r.Context(), w, http.StatusCreated, save, in)
}

// replace answers a full replacement (PUT) of the object named by the {id} path parameter. The
// body's id (idOf) may be empty, which means the path's; any other id is refused, because an
// object's id cannot change. what names the kind of object in that message.
func replace[In, Out any](w http.ResponseWriter, r *http.Request, c *call, what string, idOf func(*In) *string, validate func(*In) error, save func(context.Context, In) (Out, error)) error {
	id, in, err := decodeAt[In](r, c)
	if err != nil {
		return err
	}
	switch given := idOf(&in); *given {
	case "":
		*given = id
	case id:
	default:
		return store.Invalid("id", "%q does not match the id %q in the path; a %s's id cannot change", *given, id, what)
	}
	if err := validate(&in); err != nil {
		return err
	}
	return reply(r.Context(), w, http.StatusOK, save, in)
}

// read answers a GET or an action (POST without a body) on the object named by the {id} path
// parameter; 200 with what fn returns.
func read[Out any](w http.ResponseWriter, r *http.Request, fn func(ctx context.Context, id string) (Out, error)) error {
	id, err := pathID(r)
	if err != nil {
		return err
	}
	return reply(r.Context(), w, http.StatusOK, fn, id)
}

// post answers a POST with a JSON body to the object named by the {id} path parameter: the body
// decoded into In and checked with validate, then fn; 200 with its result.
func post[In, Out any](w http.ResponseWriter, r *http.Request, c *call, validate func(*In) error, fn func(ctx context.Context, id string, in In) (Out, error)) error {
	id, in, err := decodeAt[In](r, c)
	if err != nil {
		return err
	}
	if err := validate(&in); err != nil {
		return err
	}
	out, err := fn(r.Context(), id, in)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// listed answers a list with its items, or returns the error of reading them.
func listed[T any](w http.ResponseWriter, items []T, err error) error {
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, api.List[T]{Items: items})
	return nil
}

// remove answers a DELETE of the object named by the {id} path parameter; 204.
func remove(w http.ResponseWriter, r *http.Request, fn func(ctx context.Context, id string) error) error {
	id, err := pathID(r)
	if err != nil {
		return err
	}
	if err := fn(r.Context(), id); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// reply calls fn and answers with its result as JSON and the status code, or returns its error.
func reply[In, Out any](ctx context.Context, w http.ResponseWriter, code int, fn func(context.Context, In) (Out, error), in In) error {
	out, err := fn(ctx, in)
	if err != nil {
		return err
	}
	writeJSON(w, code, out)
	return nil
}

// decodeAt reads the {id} path parameter and decodes the JSON body into In.
func decodeAt[In any](r *http.Request, c *call) (string, In, error) {
	var in In
	id, err := pathID(r)
	if err != nil {
		return "", in, err
	}
	return id, in, decodeJSON(c.body, &in)
}

// writeJSON answers with v as JSON.
func writeJSON(w http.ResponseWriter, status int, v any) {
	data, err := json.Marshal(v)
	if err != nil {
		// Wire types always encode; reaching this is a programming error.
		http.Error(w, `{"error":{"code":"internal","message":"response encoding failed"}}`, http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	_, _ = w.Write(append(data, '\n'))
}
