// Package podtemplate checks the pod template a runner gives its Jobs. The same checks run at plan
// time in the provider, on registration in the orchestrator and at claim time in the agent, so a
// template that breaks the runner's contract is refused as early as possible with the same message.
//
// The contract: the template is a Kubernetes PodTemplateSpec in JSON; it leaves to the runner the
// fields the runner owns (restart policy, service account, the command of "main", labels under
// outpost.dev/). The container named "main" runs Terraform/OpenTofu; a template that does not
// name one (only metadata, say, as the closed agents' documentation writes them) gets an empty
// one, so every template that passes the checks builds the same Job wherever it is read.
package podtemplate

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	kjson "sigs.k8s.io/json"

	"github.com/outpost-dev/terraform-provider-outpost/internal/api"
)

// MainContainer is the name of the container the runner drives.
const MainContainer = "main"

// ErrInvalid matches every validation error of this package.
var ErrInvalid = errors.New("invalid pod template")

// Error is a validation error with the JSON path of the offending field.
type Error struct {
	// Path is a dotted path inside the template, e.g. "spec.containers[0].command".
	Path string
	// Message says what is wrong and what to do.
	Message string
}

func (e *Error) Error() string {
	if e.Path == "" {
		return e.Message
	}
	return e.Path + ": " + e.Message
}

// Is makes errors.Is(err, ErrInvalid) true.
func (e *Error) Is(target error) bool { return target == ErrInvalid }

// Parse validates a template and returns it decoded and completed (see Complete). An empty
// string is the minimal valid template: a single "main" container the agent fills in.
func Parse(raw string) (*corev1.PodTemplateSpec, error) {
	tpl, err := decode(raw)
	if err != nil {
		return nil, err
	}
	if err := Check(tpl); err != nil {
		return nil, err
	}
	Complete(tpl)
	return tpl, nil
}

// decode reads a template without checking the contract.
func decode(raw string) (*corev1.PodTemplateSpec, error) {
	if strings.TrimSpace(raw) == "" {
		return &corev1.PodTemplateSpec{}, nil
	}
	var generic any
	if err := json.Unmarshal([]byte(raw), &generic); err != nil {
		return nil, &Error{Message: "not valid JSON: " + describeJSONError(raw, err) + "; in Terraform, build it with jsonencode({...})"}
	}
	if _, ok := generic.(map[string]any); !ok {
		return nil, &Error{Message: "must be a JSON object with \"metadata\" and \"spec\" (a Kubernetes PodTemplateSpec)"}
	}
	// Decoded as the API server decodes with strict field validation: keys match field names
	// exactly, and a key given twice is refused. encoding/json would match "Spec" to spec and
	// merge a repeated key into the first, while the normal form (Normalize) keeps only the
	// last: the agent, which reads the normal form, would build another Job than the one
	// checked here.
	var tpl corev1.PodTemplateSpec
	strict, err := kjson.UnmarshalStrict([]byte(raw), &tpl)
	if err != nil {
		return nil, &Error{Message: "not a Kubernetes PodTemplateSpec: " + strings.TrimPrefix(err.Error(), "json: ")}
	}
	if len(strict) > 0 {
		msgs := make([]string, len(strict))
		for i, e := range strict {
			msgs[i] = e.Error()
		}
		return nil, &Error{Message: "not a Kubernetes PodTemplateSpec: " + strings.Join(msgs, "; ") + " (field names are case-sensitive)"}
	}
	return &tpl, nil
}

// Complete fills in what a valid template may leave out, so the code that builds a Job from it
// can rely on it. Today that is the "main" container (see Main). Settings the runner adds to its
// Jobs go here too, through Main, so the provider, the orchestrator and the agent agree on them.
func Complete(tpl *corev1.PodTemplateSpec) {
	Main(tpl)
}

// Main returns the template's "main" container, first adding an empty one in front of the others
// when the template names none (the first container is the one kubectl logs shows by default).
// The pointer is valid until the containers slice is changed.
func Main(tpl *corev1.PodTemplateSpec) *corev1.Container {
	if i := mainIndex(tpl.Spec.Containers); i >= 0 {
		return &tpl.Spec.Containers[i]
	}
	tpl.Spec.Containers = append([]corev1.Container{{Name: MainContainer}}, tpl.Spec.Containers...)
	return &tpl.Spec.Containers[0]
}

func mainIndex(cs []corev1.Container) int {
	for i, c := range cs {
		if c.Name == MainContainer {
			return i
		}
	}
	return -1
}

// Notes returns what a valid template does that its author may not expect, for a warning at plan
// time: containers other than "main" when none is named "main" (they run beside the main
// container the runner adds, and a Job ends only when all of them have exited).
func Notes(raw string) []string {
	tpl, err := decode(raw)
	if err != nil || len(tpl.Spec.Containers) == 0 || mainIndex(tpl.Spec.Containers) >= 0 {
		return nil
	}
	names := make([]string, 0, len(tpl.Spec.Containers))
	for _, c := range tpl.Spec.Containers {
		names = append(names, fmt.Sprintf("%q", c.Name))
	}
	return []string{fmt.Sprintf("spec.containers names no container %q, so the runner adds one that runs Terraform/OpenTofu, "+
		"and [%s] run beside it (a Job ends only when every container has exited). If one of them was meant to be the "+
		"runner's container, name it %q.", MainContainer, strings.Join(names, ", "), MainContainer)}
}

// Validate checks a template that arrives as field of a request body (a runner's
// job.pod_template). The error is an *api.FieldError naming the field and the path inside the
// template, so the orchestrator answers it with a 400 and the provider shows it at plan time in
// the same words.
func Validate(field, raw string) error {
	if _, err := Parse(raw); err != nil {
		var pe *Error
		if errors.As(err, &pe) && pe.Path != "" {
			return &api.FieldError{Field: field, Message: pe.Path + ": " + pe.Message}
		}
		return &api.FieldError{Field: field, Message: err.Error()}
	}
	return nil
}

// Check validates a decoded template against the runner's contract. A template without a "main"
// container passes; Complete adds one.
func Check(tpl *corev1.PodTemplateSpec) error {
	for k := range tpl.Labels {
		if strings.HasPrefix(k, "outpost.dev/") {
			return &Error{Path: "metadata.labels." + k, Message: "labels under outpost.dev/ are set by the runner; remove it"}
		}
	}
	spec := tpl.Spec
	if spec.RestartPolicy != "" && spec.RestartPolicy != corev1.RestartPolicyNever {
		return &Error{Path: "spec.restartPolicy", Message: fmt.Sprintf("the runner sets restartPolicy to Never (a deployment must not re-run by itself); remove %q", spec.RestartPolicy)}
	}
	if spec.ServiceAccountName != "" || spec.DeprecatedServiceAccount != "" { //nolint:staticcheck // the deprecated field must be refused too
		return &Error{Path: "spec.serviceAccountName", Message: "the runner sets the service account from job.service_account; remove it from the pod template"}
	}
	if err := checkNames(spec); err != nil {
		return err
	}
	mainAt := mainIndex(spec.Containers)
	if mainAt < 0 {
		return nil // Complete adds it
	}
	main := spec.Containers[mainAt]
	at := fmt.Sprintf("spec.containers[%d]", mainAt)
	if len(main.Command) > 0 {
		return &Error{Path: at + ".command", Message: "the command of \"main\" is set by the runner; remove it (use env or image to customise)"}
	}
	if len(main.Args) > 0 {
		return &Error{Path: at + ".args", Message: "the args of \"main\" are set by the runner; remove them"}
	}
	return nil
}

// checkNames refuses container names Kubernetes would refuse only when the Job is created, and
// a "main" anywhere but among the containers: Check and the Job builder look at the first
// container named "main", so a second one would run its own command unchecked.
func checkNames(spec corev1.PodSpec) error {
	seen := map[string]string{}
	for i, c := range spec.InitContainers {
		at := fmt.Sprintf("spec.initContainers[%d]", i)
		if c.Name == MainContainer {
			return &Error{Path: at + ".name", Message: "\"main\" is the runner's container, which runs in spec.containers; give this init container another name"}
		}
		if prev, dup := seen[c.Name]; dup {
			return &Error{Path: at + ".name", Message: fmt.Sprintf("%q is also the name of %s; container names must be unique", c.Name, prev)}
		}
		seen[c.Name] = at
	}
	for i, c := range spec.Containers {
		at := fmt.Sprintf("spec.containers[%d]", i)
		if prev, dup := seen[c.Name]; dup {
			return &Error{Path: at + ".name", Message: fmt.Sprintf("%q is also the name of %s; container names must be unique", c.Name, prev)}
		}
		seen[c.Name] = at
	}
	return nil
}

// Normalize returns the canonical form of a template (compact JSON, object keys sorted), so that
// two templates differing only in key order or whitespace compare equal. Empty stays empty.
// Numbers keep their text: the orchestrator stores this form and the agent builds Jobs from it,
// so 9007199254740993 must not become ...992 (float64), nor 1e2 become 100.
func Normalize(raw string) (string, error) {
	if strings.TrimSpace(raw) == "" {
		return "", nil
	}
	if err := json.Unmarshal([]byte(raw), new(any)); err != nil {
		return "", &Error{Message: "not valid JSON: " + describeJSONError(raw, err)}
	}
	dec := json.NewDecoder(strings.NewReader(raw))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return "", fmt.Errorf("decode pod template: %w", err)
	}
	out, err := json.Marshal(v)
	if err != nil {
		return "", fmt.Errorf("re-encode pod template: %w", err)
	}
	return string(out), nil
}

// describeJSONError turns a byte offset into a line and column a person can find.
func describeJSONError(raw string, err error) string {
	var se *json.SyntaxError
	if errors.As(err, &se) {
		line, col := 1, 1
		for i := int64(0); i < se.Offset-1 && int(i) < len(raw); i++ {
			if raw[i] == '\n' {
				line++
				col = 1
			} else {
				col++
			}
		}
		return fmt.Sprintf("%s at line %d, column %d", se.Error(), line, col)
	}
	return err.Error()
}
