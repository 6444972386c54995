package cli

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"reflect"
	"slices"
	"strconv"
	"strings"

	"sigs.k8s.io/yaml"
)

// manifest is how a create or update command builds its request body: a YAML or JSON file in
// the API's shape (-f), then --set overrides.
type manifest struct {
	file string
	sets []string
}

// docAdapter adapts a document to the API's shape before it is decoded. adapt drops the fields
// of what `get -o yaml` prints that the API sets itself (so that output can be edited and fed
// back) and translates another tool's shape, saying what it did; foreign names the top-level
// keys of that shape, which --set may address although the API has no such field.
type docAdapter struct {
	adapt   func(doc map[string]any) (*translation, error)
	foreign []string
}

// readInput builds a request body of type In. The document starts as the file (-f; "-" reads
// stdin), else as base (the resource as it is, for an update without -f), else empty. The
// --set values of foreign keys are applied first, as YAML or JSON without a type to follow;
// then the adapter runs; then each other --set path=value is applied: the path names fields
// with dots (job.namespace, public_keys.1), the value is converted to the field's type, and a
// value starting with @ is read from the file it names.
func readInput[In any](stdin io.Reader, m manifest, base map[string]any, ad docAdapter) (In, *translation, error) {
	var in In
	doc := base
	if m.file != "" {
		var err error
		if doc, err = readDoc(stdin, m.file); err != nil {
			return in, nil, err
		}
	}
	if doc == nil {
		doc = map[string]any{}
	}
	type set struct{ path, value string }
	var typed []set
	for _, s := range m.sets {
		path, value, ok := strings.Cut(s, "=")
		if !ok || path == "" {
			return in, nil, &usageError{fmt.Errorf("--set %q: write it as path=value, e.g. --set job.namespace=deploy", s)}
		}
		if strings.HasPrefix(value, "@") {
			b, err := os.ReadFile(value[1:])
			if err != nil {
				return in, nil, fmt.Errorf("--set %s: %w", path, err)
			}
			value = string(b)
		}
		if slices.Contains(ad.foreign, path) {
			v, err := convert(value, reflect.TypeFor[map[string]any]())
			if err != nil {
				return in, nil, &usageError{fmt.Errorf("--set %s: %w", path, err)}
			}
			doc[path] = v
			continue
		}
		typed = append(typed, set{path, value})
	}
	var tr *translation
	if ad.adapt != nil {
		var err error
		if tr, err = ad.adapt(doc); err != nil {
			return in, nil, fmt.Errorf("%s: %w", source(m.file), err)
		}
	}
	t := reflect.TypeOf(in)
	for _, s := range typed {
		v, err := setPath(doc, t, strings.Split(s.path, "."), s.value)
		if err != nil {
			return in, nil, &usageError{fmt.Errorf("--set %s: %w", s.path, err)}
		}
		doc, _ = v.(map[string]any) // a struct's document is an object
	}
	data, err := json.Marshal(doc)
	if err != nil {
		return in, nil, err
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&in); err != nil {
		return in, nil, fmt.Errorf("%s: %s", source(m.file), decodeProblem(err, t))
	}
	return in, tr, nil
}

func source(file string) string {
	switch file {
	case "":
		return "the --set values"
	case "-":
		return "stdin"
	}
	return file
}

// readDoc reads a YAML or JSON object (JSON is YAML).
func readDoc(stdin io.Reader, file string) (map[string]any, error) {
	var data []byte
	var err error
	if file == "-" {
		data, err = io.ReadAll(stdin)
	} else {
		data, err = os.ReadFile(file)
	}
	if err != nil {
		return nil, err
	}
	js, err := yaml.YAMLToJSON(data)
	if err != nil {
		return nil, fmt.Errorf("%s is neither YAML nor JSON: %w", source(file), err)
	}
	var doc map[string]any
	if err := json.Unmarshal(js, &doc); err != nil || doc == nil {
		return nil, fmt.Errorf("%s must hold one object (key: value lines), not %s", source(file), strings.TrimSpace(oneLine(string(js), 40)))
	}
	return doc, nil
}

// setPath sets the value at path in the document cur, whose shape is the Go type t, converting
// the string value to the type found at the end of the path. It returns the new document.
func setPath(cur any, t reflect.Type, path []string, value string) (any, error) {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if len(path) == 0 {
		return convert(value, t)
	}
	seg := path[0]
	switch t.Kind() {
	case reflect.Struct:
		ft, ok := jsonField(t, seg)
		if !ok {
			return nil, fmt.Errorf("no field %q here; the fields are %s", seg, strings.Join(jsonFields(t), ", "))
		}
		m, _ := cur.(map[string]any)
		if m == nil {
			m = map[string]any{}
		}
		v, err := setPath(m[seg], ft, path[1:], value)
		m[seg] = v
		return m, err
	case reflect.Slice:
		i, err := strconv.Atoi(seg)
		l, _ := cur.([]any)
		if err != nil || i < 0 || i > len(l) {
			return nil, fmt.Errorf("%q is not an index of the list (it has %d items; %d appends one)", seg, len(l), len(l))
		}
		if i == len(l) {
			l = append(l, nil)
		}
		v, err := setPath(l[i], t.Elem(), path[1:], value)
		l[i] = v
		return l, err
	case reflect.Map:
		m, _ := cur.(map[string]any)
		if m == nil {
			m = map[string]any{}
		}
		v, err := setPath(m[seg], t.Elem(), path[1:], value)
		m[seg] = v
		return m, err
	}
	return nil, fmt.Errorf("a %s has no field %q", kindName(t), seg)
}

// convert turns a --set value into the JSON value a field of type t takes.
func convert(value string, t reflect.Type) (any, error) {
	switch t.Kind() {
	case reflect.String:
		return value, nil
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		n, err := strconv.ParseInt(strings.TrimSpace(value), 10, 64)
		if err != nil {
			return nil, fmt.Errorf("%q is not a whole number", value)
		}
		return n, nil
	case reflect.Bool:
		b, err := strconv.ParseBool(strings.TrimSpace(value))
		if err != nil {
			return nil, fmt.Errorf("%q is not true or false", value)
		}
		return b, nil
	}
	// Lists, objects and free-form values: YAML or JSON, e.g. --set 'public_keys=[...]'.
	js, err := yaml.YAMLToJSON([]byte(value))
	if err != nil {
		return nil, fmt.Errorf("%q is not a YAML or JSON %s: %w", value, kindName(t), err)
	}
	var v any
	if err := json.Unmarshal(js, &v); err != nil {
		return nil, err
	}
	return v, nil
}

func kindName(t reflect.Type) string {
	switch t.Kind() {
	case reflect.Slice:
		return "list"
	case reflect.Map, reflect.Struct:
		return "object"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return "number"
	case reflect.Bool:
		return "boolean"
	}
	return t.Kind().String()
}

// jsonField finds the field of struct t whose JSON name is name.
func jsonField(t reflect.Type, name string) (reflect.Type, bool) {
	for i := range t.NumField() {
		f := t.Field(i)
		if f.Anonymous {
			if ft, ok := jsonField(f.Type, name); ok {
				return ft, true
			}
			continue
		}
		if tag, _, _ := strings.Cut(f.Tag.Get("json"), ","); tag == name {
			return f.Type, true
		}
	}
	return nil, false
}

// jsonFields lists the JSON names of struct t's fields.
func jsonFields(t reflect.Type) []string {
	var out []string
	for i := range t.NumField() {
		f := t.Field(i)
		if f.Anonymous {
			out = append(out, jsonFields(f.Type)...)
			continue
		}
		if tag, _, _ := strings.Cut(f.Tag.Get("json"), ","); tag != "" && tag != "-" {
			out = append(out, tag)
		}
	}
	return out
}

// decodeProblem words a strict decoding error for people.
func decodeProblem(err error, t reflect.Type) string {
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) {
		return fmt.Sprintf("%s: a %s where a %s is expected", te.Field, te.Value, kindName(te.Type))
	}
	if msg := err.Error(); strings.HasPrefix(msg, "json: unknown field ") {
		return fmt.Sprintf("unknown field %s; the fields are %s", strings.TrimPrefix(msg, "json: unknown field "), strings.Join(jsonFields(t), ", "))
	}
	return err.Error()
}
