package statebackend

import "time"

// WithLimits bounds the handler's work in progress (see Limits).
func WithLimits(l Limits) Option { return withLimiter(newLimiter(l)) }

// WithMaxBodyBytes sets the largest accepted state upload (default 64 MiB); larger → 413.
func WithMaxBodyBytes(n int64) Option { return WithLimits(Limits{MaxBodyBytes: n}) }

// WithRenewInterval sets how often held locks are renewed (default: a third of the store's
// lock duration).
func WithRenewInterval(d time.Duration) Option { return func(h *Handler) { h.renewEvery = d } }

// WithSweepInterval sets how often the handler looks for locks whose holder's pod is gone.
func WithSweepInterval(d time.Duration) Option { return func(h *Handler) { h.sweepEvery = d } }
