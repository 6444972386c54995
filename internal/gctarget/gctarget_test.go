package gctarget

import (
	"runtime/debug"
	"testing"
)

// The collector's target is Percent unless GOGC is set, which wins.
func TestApply(t *testing.T) {
	before := debug.SetGCPercent(100)
	defer debug.SetGCPercent(before)
	Apply(func(string) string { return "" })
	if got := debug.SetGCPercent(100); got != Percent {
		t.Errorf("GC percent %d without GOGC, want %d", got, Percent)
	}
	Apply(func(k string) string { return map[string]string{"GOGC": "200"}[k] })
	if got := debug.SetGCPercent(100); got != 100 {
		t.Errorf("GC percent %d with GOGC set, want it left alone (100)", got)
	}
}
