package podtemplate

import (
	"errors"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"

	"github.com/outpost-dev/terraform-provider-outpost/internal/api"
)

// FuzzParse checks the pod-template contract on any text. A refusal is a typed *Error (and
// Validate's a *api.FieldError); an accepted template, completed, has exactly one "main"
// container running nothing of the template's own, and none of the fields the runner owns.
// Because the orchestrator stores the normalised form and the agent parses that, the normal
// form of an accepted template is accepted and decodes to the same template; normalising is
// idempotent.
// Seeds: testdata/fuzz/FuzzParse (the documented shapes, "main" twice, main as an init
// container, owned fields, keys differing in case, duplicate keys, large and float numbers).
func FuzzParse(f *testing.F) {
	f.Fuzz(func(t *testing.T, raw string) {
		tpl, err := Parse(raw)
		verr := Validate("job.pod_template", raw)
		if (err == nil) != (verr == nil) {
			t.Fatalf("Parse says %v, Validate says %v", err, verr)
		}
		_ = Notes(raw)
		if err != nil {
			var pe *Error
			var fe *api.FieldError
			if !errors.As(err, &pe) || !errors.Is(err, ErrInvalid) || !errors.As(verr, &fe) {
				t.Fatalf("refusal %v (%T) / %v (%T) is not typed", err, err, verr, verr)
			}
		} else {
			checkContract(t, tpl)
			again := tpl.DeepCopy()
			Complete(again)
			if !equality.Semantic.DeepEqual(again, tpl) {
				t.Fatal("Complete changed a completed template")
			}
		}

		norm, nerr := Normalize(raw)
		if nerr != nil {
			if err == nil {
				t.Fatalf("accepted template does not normalise: %v", nerr)
			}
			return
		}
		if norm2, err := Normalize(norm); err != nil || norm2 != norm {
			t.Fatalf("Normalize is not idempotent:\n%s\n%s (%v)", norm, norm2, err)
		}
		if err != nil {
			return // never stored; its normal form may be valid (a key given twice keeps the last)
		}
		tplN, errN := Parse(norm)
		if errN != nil {
			t.Fatalf("the normal form of an accepted template is refused: %v\ntext: %q\nnormal form: %q", errN, raw, norm)
		}
		if !equality.Semantic.DeepEqual(tpl, tplN) {
			t.Fatalf("the normal form decodes to another template\ntext: %q\nnormal form: %q", raw, norm)
		}
	})
}

// checkContract checks what every accepted, completed template guarantees the Job builder.
func checkContract(t *testing.T, tpl *corev1.PodTemplateSpec) {
	t.Helper()
	mains := 0
	for _, c := range tpl.Spec.Containers {
		if c.Name != MainContainer {
			continue
		}
		mains++
		if len(c.Command) > 0 || len(c.Args) > 0 {
			t.Fatalf("accepted a main container with command %q args %q", c.Command, c.Args)
		}
	}
	if mains != 1 {
		t.Fatalf("accepted template has %d containers named %q", mains, MainContainer)
	}
	for _, c := range tpl.Spec.InitContainers {
		if c.Name == MainContainer {
			t.Fatalf("accepted an init container named %q", MainContainer)
		}
	}
	if p := tpl.Spec.RestartPolicy; p != "" && p != corev1.RestartPolicyNever {
		t.Fatalf("accepted restartPolicy %q", p)
	}
	if tpl.Spec.ServiceAccountName != "" || tpl.Spec.DeprecatedServiceAccount != "" { //nolint:staticcheck // the deprecated field must stay empty too
		t.Fatal("accepted a service account")
	}
	for k := range tpl.Labels {
		if strings.HasPrefix(k, "outpost.dev/") {
			t.Fatalf("accepted the owned label %q", k)
		}
	}
}
