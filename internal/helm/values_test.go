package helm

import (
	"encoding/json"
	"reflect"
	"testing"
)

func TestParseValues(t *testing.T) {
	for _, tc := range []struct {
		doc     string
		want    map[string]any
		wantErr bool
	}{
		{doc: "", want: map[string]any{}},
		{doc: "  \n", want: map[string]any{}},
		{doc: "a: 1\nb:\n  c: x\n", want: map[string]any{"a": float64(1), "b": map[string]any{"c": "x"}}},
		{doc: `{"a": [1, "two"]}`, want: map[string]any{"a": []any{float64(1), "two"}}},
		{doc: "- a\n- b\n", wantErr: true},
		{doc: "a: [", wantErr: true},
	} {
		got, err := ParseValues(tc.doc)
		if (err != nil) != tc.wantErr {
			t.Errorf("ParseValues(%q): err %v", tc.doc, err)
			continue
		}
		if !tc.wantErr && !reflect.DeepEqual(got, tc.want) {
			t.Errorf("ParseValues(%q) = %#v, want %#v", tc.doc, got, tc.want)
		}
	}
}

func TestMergeValues(t *testing.T) {
	base := map[string]any{"a": 1, "m": map[string]any{"x": 1, "y": 2}, "gone": "soon", "list": []any{1, 2}}
	over := map[string]any{"m": map[string]any{"y": 3, "z": 4}, "gone": nil, "list": []any{3}, "new": true}
	got := MergeValues(base, over)
	want := map[string]any{"a": 1, "m": map[string]any{"x": 1, "y": 3, "z": 4}, "list": []any{3}, "new": true}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got %#v\nwant %#v", got, want)
	}
	if m, _ := base["m"].(map[string]any); base["new"] != nil || m["y"] != 2 {
		t.Fatal("MergeValues changed its input")
	}
}

func TestValuesSHA256SurvivesJSONRoundTrip(t *testing.T) {
	vals := map[string]any{"replicaCount": int64(2), "b": map[string]string{"k": "v"}, "a": []any{"x", 3}, "f": true}
	want, err := ValuesSHA256(vals)
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := json.Marshal(vals)
	var back map[string]any
	if err := json.Unmarshal(raw, &back); err != nil {
		t.Fatal(err)
	}
	got, err := ValuesSHA256(back)
	if err != nil {
		t.Fatal(err)
	}
	if got != want {
		t.Fatalf("hash changed over a JSON round trip: %s != %s", got, want)
	}
	other, _ := ValuesSHA256(map[string]any{"replicaCount": 3})
	if other == want {
		t.Fatal("different values hash the same")
	}
}
