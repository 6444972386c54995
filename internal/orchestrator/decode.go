package orchestrator

import (
	"bytes"
	"encoding"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"reflect"
	"sort"
	"strconv"
	"strings"

	"github.com/outpost-dev/terraform-provider-outpost/internal/api"
	"github.com/outpost-dev/terraform-provider-outpost/internal/orchestrator/store"
)

// decodeJSON decodes a request body strictly: unknown fields, wrong types, trailing data and
// syntax errors are 400s whose field is the JSON path at fault, so a caller with a typo learns
// which key, not just that something was wrong.
func decodeJSON(body []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	err := dec.Decode(v)
	if err == nil {
		if _, extra := dec.Token(); !errors.Is(extra, io.EOF) {
			return store.Invalid("", "request body holds more than one JSON value; send exactly one object")
		}
		return nil
	}
	var syn *json.SyntaxError
	var typ *json.UnmarshalTypeError
	switch {
	case errors.As(err, &syn):
		return store.Invalid("", "request body is not valid JSON: %s at byte %d", syn.Error(), syn.Offset)
	case errors.As(err, &typ):
		field := typ.Field
		if field == "" {
			return store.Invalid("", "request body must be a JSON %s, got %s", jsonKind(typ.Type), typ.Value)
		}
		return store.Invalid(field, "must be %s, got %s", jsonKind(typ.Type), typ.Value)
	case errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, io.EOF):
		return store.Invalid("", "request body ends in the middle of a JSON value")
	case strings.HasPrefix(err.Error(), "json: unknown field "):
		name := strings.Trim(strings.TrimPrefix(err.Error(), "json: unknown field "), `"`)
		path := unknownFieldPath(body, reflect.TypeOf(v))
		if path == "" {
			path = name
		}
		return store.Invalid(path, "unknown field %q; check the spelling against the API reference", path)
	}
	return store.Invalid("", "request body cannot be decoded: %v", err)
}

func jsonKind(t reflect.Type) string {
	switch t.Kind() {
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "a boolean"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "an integer"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.Slice, reflect.Array:
		return "an array"
	case reflect.Map, reflect.Struct:
		return "an object"
	}
	return "a " + t.String()
}

var (
	jsonUnmarshaler = reflect.TypeFor[json.Unmarshaler]()
	textUnmarshaler = reflect.TypeFor[encoding.TextUnmarshaler]()
)

// unknownFieldPath finds the JSON path of the first (in sorted key order) field of body that t
// does not know, matching names the way encoding/json does (exact, then case-insensitive).
func unknownFieldPath(body []byte, t reflect.Type) string {
	var v any
	if json.Unmarshal(body, &v) != nil {
		return ""
	}
	return walkUnknown(v, t, "")
}

func walkUnknown(v any, t reflect.Type, path string) string {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if reflect.PointerTo(t).Implements(jsonUnmarshaler) || reflect.PointerTo(t).Implements(textUnmarshaler) {
		return ""
	}
	switch x := v.(type) {
	case map[string]any:
		names := make([]string, 0, len(x))
		for k := range x {
			names = append(names, k)
		}
		sort.Strings(names)
		for _, k := range names {
			var ft reflect.Type
			switch t.Kind() {
			case reflect.Struct:
				f, ok := structField(t, k)
				if !ok {
					return joinPath(path, k)
				}
				ft = f
			case reflect.Map:
				ft = t.Elem()
			default:
				return ""
			}
			if p := walkUnknown(x[k], ft, joinPath(path, k)); p != "" {
				return p
			}
		}
	case []any:
		if t.Kind() != reflect.Slice && t.Kind() != reflect.Array {
			return ""
		}
		for i, e := range x {
			if p := walkUnknown(e, t.Elem(), fmt.Sprintf("%s[%d]", path, i)); p != "" {
				return p
			}
		}
	}
	return ""
}

func joinPath(path, k string) string {
	if path == "" {
		return k
	}
	return path + "." + k
}

// structField returns the type of the field JSON name k maps to in struct type t.
func structField(t reflect.Type, k string) (reflect.Type, bool) {
	var fold reflect.Type
	for i := range t.NumField() {
		f := t.Field(i)
		if !f.IsExported() {
			continue
		}
		tag := f.Tag.Get("json")
		if tag == "-" {
			continue
		}
		name, _, _ := strings.Cut(tag, ",")
		if f.Anonymous && name == "" {
			ft := f.Type
			if ft.Kind() == reflect.Pointer {
				ft = ft.Elem()
			}
			if ft.Kind() == reflect.Struct {
				if inner, ok := structField(ft, k); ok {
					return inner, true
				}
				continue
			}
		}
		if name == "" {
			name = f.Name
		}
		if name == k {
			return f.Type, true
		}
		if fold == nil && strings.EqualFold(name, k) {
			fold = f.Type
		}
	}
	return fold, fold != nil
}

// pathID reads and checks the {id} path parameter; a malformed id is a 400, not a 404, so a
// caller learns the id can never exist.
func pathID(r *http.Request) (string, error) {
	id := r.PathValue("id")
	return id, api.ValidateID("id", id)
}

// queryInt reads an optional non-negative integer query parameter.
func queryInt(r *http.Request, name string, def int64) (int64, error) {
	v := r.URL.Query().Get(name)
	if v == "" {
		return def, nil
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < 0 {
		return 0, store.Invalid(name, "%q is not a non-negative integer", v)
	}
	return n, nil
}
