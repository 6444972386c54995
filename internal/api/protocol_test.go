package api

import (
	"strings"
	"testing"
)

func TestNegotiatePicksTheHighestCommonVersion(t *testing.T) {
	for _, c := range []struct {
		a, b ProtocolRange
		want int
		ok   bool
	}{
		{ProtocolRange{1, 1}, ProtocolRange{1, 1}, 1, true},
		{ProtocolRange{1, 3}, ProtocolRange{2, 5}, 3, true},
		{ProtocolRange{2, 5}, ProtocolRange{1, 3}, 3, true},
		{ProtocolRange{1, 1}, ProtocolRange{2, 3}, 0, false},
		{ProtocolRange{4, 4}, ProtocolRange{2, 3}, 0, false},
		{ProtocolRange{}, ProtocolRange{1, 1}, 0, false},
		{ProtocolRange{3, 2}, ProtocolRange{1, 5}, 0, false},
	} {
		got, ok := Negotiate(c.a, c.b)
		if got != c.want || ok != c.ok {
			t.Errorf("Negotiate(%+v, %+v) = %d, %v; want %d, %v", c.a, c.b, got, ok, c.want, c.ok)
		}
	}
	if got := (ProtocolRange{}).Stated(); got != (ProtocolRange{LegacyProtocol, LegacyProtocol}) {
		t.Errorf("an empty range is read as %+v, want the legacy protocol alone", got)
	}
}

func TestIncompatibleProtocolMessageNamesBothSidesAndTheFix(t *testing.T) {
	older := IncompatibleProtocolMessage("1.0.0", ProtocolRange{1, 1}, "2.0.0", ProtocolRange{2, 3})
	for _, want := range []string{"agent 1.0.0 speaks agent protocol 1", "orchestrator 2.0.0 speaks 2 to 3", "upgrade the agent"} {
		if !strings.Contains(older, want) {
			t.Errorf("message %q lacks %q", older, want)
		}
	}
	newer := IncompatibleProtocolMessage("3.0.0", ProtocolRange{4, 5}, "", ProtocolRange{1, 2})
	for _, want := range []string{"agent 3.0.0 speaks agent protocol 4 to 5", "orchestrator (version unknown) speaks 1 to 2", "upgrade the orchestrator"} {
		if !strings.Contains(newer, want) {
			t.Errorf("message %q lacks %q", newer, want)
		}
	}
}
