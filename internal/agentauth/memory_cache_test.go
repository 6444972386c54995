package agentauth

import (
	"context"
	"sync"
	"time"
)

// MemoryReplayCache is an in-process ReplayCache. The reference orchestrator persists ids in its
// store instead, so that a restart does not reopen the replay window; this one serves tests and
// single-process tools.
type MemoryReplayCache struct {
	mu   sync.Mutex
	ids  map[string]time.Time
	Now  func() time.Time
	last time.Time
}

// NewMemoryReplayCache returns an empty cache.
func NewMemoryReplayCache() *MemoryReplayCache {
	return &MemoryReplayCache{ids: map[string]time.Time{}, Now: time.Now}
}

// CheckAndStore implements ReplayCache.
func (c *MemoryReplayCache) CheckAndStore(_ context.Context, id string, until time.Time) (bool, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := c.Now()
	if now.Sub(c.last) > time.Minute {
		for k, exp := range c.ids {
			if now.After(exp) {
				delete(c.ids, k)
			}
		}
		c.last = now
	}
	if exp, ok := c.ids[id]; ok && !now.After(exp) {
		return true, nil
	}
	c.ids[id] = until
	return false, nil
}
