// Package gctarget sets the garbage collector's target of Outpost's long-running processes (the
// agent and the reference orchestrator) when the user has not: GOGC, if set, always wins.
package gctarget

import "runtime/debug"

// Percent is the target: collect when the heap has grown by half, not doubled (Go's default,
// 100). Both processes hold mostly long-lived memory that turns to garbage slowly (the
// orchestrator: idle agents' parked long polls, two a minute each; the agent: its informers'
// caches of Jobs, pods and Secrets), so a lower target keeps less headroom for little CPU.
// BENCHMARKS.md has both measured side by side: the orchestrator at 10,000 idle agents, the
// agent idle and with 100 and 1,000 Jobs in flight.
const Percent = 50

// Apply sets the collector's target to Percent unless getenv("GOGC") is set.
func Apply(getenv func(string) string) {
	if getenv("GOGC") == "" {
		debug.SetGCPercent(Percent)
	}
}
