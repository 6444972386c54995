package api

import (
	"errors"
	"strings"
	"testing"
)

func TestDeriveID(t *testing.T) {
	cases := []struct{ in, want string }{
		{"my-runner", "my-runner"},
		{"Prod_EU", "prod-eu"},
		{"gke_acme-prod_europe-west1_main", "gke-acme-prod-europe-west1-main"},
		{"kubernetes-agent-arn:aws:eks:eu-west-1:123456789012:cluster/prod", "kubernetes-agent-arn-aws-c0be03e0-1-123456789012-cluster-prod"},
		{"  --Ärger//x--  ", "rger-x"},
		{strings.Repeat("a", 63), strings.Repeat("a", 63)},
	}
	for _, tc := range cases {
		got, err := DeriveID(tc.in)
		if err != nil {
			t.Fatalf("DeriveID(%q): %v", tc.in, err)
		}
		if tc.want != "" && got != tc.want {
			t.Errorf("DeriveID(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
	for _, in := range []string{"", "---", "::/", "ÄÖÜ"} {
		if _, err := DeriveID(in); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "no letter or digit") {
			t.Errorf("DeriveID(%q) error = %v", in, err)
		}
	}
}

// TestDeriveIDAlwaysValid: every result passes ValidateID and is the same on every call, and long
// names that share a beginning or an end, or that differ only in case, never share an id.
func TestDeriveIDAlwaysValid(t *testing.T) {
	base := "kubernetes-agent-arn:aws:eks:eu-west-1:123456789012:cluster/"
	var long, short []string
	for n := 40; n <= 90; n++ {
		long = append(long, base+strings.Repeat("x", n), strings.Repeat("y", n)+"-prod-"+base)
		short = append(short, "a"+strings.Repeat("-", n)+"b", strings.Repeat("_", n)+"c")
	}
	long = append(long, base+"PROD-long-enough-to-be-cut", base+"prod-long-enough-to-be-cut")
	seen := map[string]string{}
	for i, in := range append(long, short...) {
		id, err := DeriveID(in)
		if err != nil {
			t.Fatalf("DeriveID(%q): %v", in, err)
		}
		if err := ValidateID("id", id); err != nil {
			t.Errorf("DeriveID(%q) = %q is not valid: %v", in, id, err)
		}
		if again, _ := DeriveID(in); again != id {
			t.Errorf("DeriveID(%q) is not deterministic: %q then %q", in, id, again)
		}
		if i >= len(long) {
			continue // short names may share an id ("a--b" and "a-b")
		}
		if other, dup := seen[id]; dup {
			t.Errorf("%q and %q both give %q", other, in, id)
		}
		seen[id] = in
	}
}
