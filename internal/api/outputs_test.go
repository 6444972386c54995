package api

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
)

// Cap keeps outputs in name order while they fit, skips one too large for what is left, and the
// JSON of what it keeps is never larger than the bound (the upload's body limit).
func TestOutputsCap(t *testing.T) {
	outs := Outputs{}
	for i := range 300 {
		v, _ := json.Marshal(strings.Repeat("x<&>", i*7))
		outs[fmt.Sprintf("o%03d", i)] = Output{Value: v, Type: json.RawMessage(`"string"`), Sensitive: i%3 == 0}
	}
	for _, c := range []struct{ count, bytes int }{{1000, 1 << 20}, {100, 1 << 20}, {1000, 64 << 10}, {1000, 10}, {0, 1 << 20}} {
		kept, omitted := outs.Cap(c.count, c.bytes)
		body, err := json.Marshal(kept)
		if err != nil {
			t.Fatal(err)
		}
		if len(kept) > c.count || len(body) > c.bytes || len(kept)+len(omitted) != len(outs) {
			t.Errorf("cap %d outputs, %d bytes: kept %d (%d bytes), omitted %d of %d", c.count, c.bytes, len(kept), len(body), len(omitted), len(outs))
		}
		for _, n := range omitted {
			if _, ok := kept[n]; ok {
				t.Errorf("%s both kept and omitted", n)
			}
		}
	}
	// A large output early in name order does not push out every later one.
	big := Outputs{"a": {Value: json.RawMessage(`"` + strings.Repeat("x", 2000) + `"`)}, "b": {Value: json.RawMessage(`1`)}}
	if kept, omitted := big.Cap(10, 1000); len(kept) != 1 || len(omitted) != 1 || omitted[0] != "a" {
		t.Errorf("kept %v, omitted %v; want b kept and a left out", kept, omitted)
	}
}
