package store

import (
	"context"
	"time"
)

// replayCache is the agentauth.ReplayCache of the orchestrator. Token ids live in the database,
// so a restart does not reopen the replay window: a token captured before the restart is still
// refused after it, and with PostgreSQL a token spent on one replica is refused by the others.
type replayCache struct{ s *Store }

// ReplayCache is the store as an agentauth.ReplayCache.
func (s *Store) ReplayCache() replayCache { return replayCache{s} }

// CheckAndStore implements agentauth.ReplayCache atomically, so two requests carrying the same
// id cannot both pass.
func (c replayCache) CheckAndStore(ctx context.Context, id string, until time.Time) (bool, error) {
	if err := ctx.Err(); err != nil {
		return false, err
	}
	return c.s.eng.CheckReplay(ctx, id, c.s.now(), until)
}

// PurgeReplay deletes token ids whose tokens can no longer pass the expiry check anyway.
func (s *Store) PurgeReplay(ctx context.Context) (int, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	return s.eng.PurgeReplay(ctx, s.now())
}
