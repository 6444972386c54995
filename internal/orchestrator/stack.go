package orchestrator

// onFreshStack runs f on a goroutine of its own and waits for it, passing on a panic.
//
// A long poll parks its connection's goroutine for up to 30 s, and an orchestrator holds one per
// idle agent. Work that needs a deep stack (checking a signed token, JSON, store reads and
// writes) would grow that goroutine's stack to 16 KiB, and the runtime only halves a stack whose
// use is under a quarter of it, which a parked poll's frames are not: at 10,000 agents that was
// some 160 MB of stacks (and as much again of garbage collector headroom, which counts stacks).
// Run on a short-lived goroutine, that work's stack is freed when it returns, and the parked
// goroutine keeps the few frames it waits in.
func onFreshStack(f func()) {
	done := make(chan any, 1)
	go func() {
		defer func() { done <- recover() }()
		f()
	}()
	if p := <-done; p != nil {
		panic(p)
	}
}
