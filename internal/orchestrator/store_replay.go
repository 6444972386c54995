package orchestrator

import (
	"bytes"
	"context"
	"encoding/binary"
	"time"

	bolt "go.etcd.io/bbolt"
)

// replayCache is the agentauth.ReplayCache of the orchestrator. Token ids live in the database,
// so a restart does not reopen the replay window: a token captured before the restart is still
// refused after it.
type replayCache struct{ s *store }

// CheckAndStore implements agentauth.ReplayCache in a write transaction, so two requests
// carrying the same id cannot both pass. Every agent request comes here, so it runs as a batch:
// the requests of the same few milliseconds share one commit (checked one after the other inside
// it) instead of queueing one commit, and its fsyncs, each.
func (c replayCache) CheckAndStore(ctx context.Context, id string, until time.Time) (bool, error) {
	seen := false
	err := c.s.batch(ctx, func(tx *bolt.Tx) error {
		seen = false
		b := tx.Bucket(bReplay)
		now := c.s.now()
		if v := b.Get([]byte(id)); len(v) == 8 {
			if exp := time.Unix(0, int64(binary.BigEndian.Uint64(v))); !now.After(exp) {
				seen = true
				return nil
			}
		}
		exp := u64(uint64(until.UnixNano()))
		if err := b.Put([]byte(id), exp); err != nil {
			return err
		}
		return tx.Bucket(bReplayEx).Put(append(exp, id...), nil)
	})
	return seen, err
}

// purgeReplay deletes token ids whose tokens can no longer pass the expiry check anyway.
func (s *store) purgeReplay(ctx context.Context) (int, error) {
	limit := u64(uint64(s.now().UnixNano()))
	due := false
	if err := s.view(ctx, func(tx *bolt.Tx) error {
		k, _ := tx.Bucket(bReplayEx).Cursor().First()
		due = len(k) > 8 && bytes.Compare(k[:8], limit) < 0
		return nil
	}); err != nil || !due {
		return 0, err
	}
	n := 0
	err := s.update(ctx, func(tx *bolt.Tx) error {
		ids, byExp := tx.Bucket(bReplay), tx.Bucket(bReplayEx)
		c := byExp.Cursor()
		var dead [][]byte
		for k, _ := c.First(); len(k) > 8 && bytes.Compare(k[:8], limit) < 0; k, _ = c.Next() {
			dead = append(dead, bytes.Clone(k))
		}
		for _, k := range dead {
			id := k[8:]
			// Only drop the id if it was not stored again with a later expiry.
			if v := ids.Get(id); v != nil && bytes.Equal(v, k[:8]) {
				if err := ids.Delete(id); err != nil {
					return err
				}
			}
			if err := byExp.Delete(k); err != nil {
				return err
			}
			n++
		}
		return nil
	})
	return n, err
}
