package provider

import (
	"strings"
	"time"

	"github.com/hashicorp/terraform-plugin-framework/types/basetypes"
)

// Ensure the custom type satisfies the framework interfaces.
var (
	_ basetypes.StringTypable                    = durationType{}
	_ basetypes.StringValuableWithSemanticEquals = durationValue{}
)

// durationForm makes Go duration strings ("90m", "1h30m") that denote the same duration equal,
// so "60m" in the configuration and "1h" read back from the orchestrator (which keeps seconds)
// never show a diff.
type durationForm struct{}

func (durationForm) typeName() string { return "durationType" }

func (durationForm) normalize(s string) (string, error) {
	d, err := time.ParseDuration(s)
	if err != nil {
		return "", err
	}
	return d.String(), nil
}

// durationType is the custom type of duration attributes.
type durationType = semanticStringType[durationForm]

// durationValue is a value of durationType.
type durationValue = semanticStringValue[durationForm]

func newDurationValue(s string) durationValue {
	return durationValue{StringValue: basetypes.NewStringValue(s)}
}

// formatSeconds renders whole seconds in the shortest duration form: 3600 → "1h", 5400 → "1h30m".
func formatSeconds(secs int) string {
	d := time.Duration(secs) * time.Second
	s := d.String() // e.g. "1h30m0s"
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}
