package orchestrator

import "testing"

func TestOnFreshStackRunsAndPassesPanicsOn(t *testing.T) {
	ran := false
	onFreshStack(func() { ran = true })
	if !ran {
		t.Fatal("f did not run before onFreshStack returned")
	}
	defer func() {
		if p := recover(); p != "boom" {
			t.Fatalf("recovered %v, want the panic of f", p)
		}
	}()
	onFreshStack(func() { panic("boom") })
	t.Fatal("a panic of f did not reach the caller")
}
