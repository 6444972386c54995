package orchestrator

import (
	"context"
	"fmt"
	"github.com/outpost-dev/terraform-provider-outpost/internal/orchestrator/store"
	"time"
)

// The sweeper: the background pass that applies the store's time-driven rules (job lease
// expiry, schedules' drift checks, replay purge, retention) and wakes the polls and counts the metrics their outcome
// calls for. The rules themselves are the store's.

// Sweep runs one pass of the background sweeper now: it settles expired leases, fires due
// schedules (each once across replicas: store.FireDueSchedules), purges expired
// agent token ids and console sessions and deletes what retention says is due. The server runs it every
// SweepInterval; tests with a fake clock call it after moving the clock, instead of waiting.
func (s *Server) Sweep(ctx context.Context) error {
	runners, err := s.store.ExpireLeases(ctx)
	for _, r := range runners {
		s.notify.Wake(r)
	}
	if err != nil {
		return fmt.Errorf("expire job leases: %w", err)
	}
	fired, err := s.store.FireDueSchedules(ctx)
	for _, f := range fired {
		s.notify.Wake(f.Org + "/" + f.RunnerID)
		s.log.Info("schedule fired a drift check", "org", f.Org, "schedule", f.ScheduleID, "deployment", f.DeploymentID)
	}
	if err != nil {
		return fmt.Errorf("fire schedules: %w", err)
	}
	if _, err := s.store.PurgeReplay(ctx); err != nil {
		return fmt.Errorf("purge agent token ids: %w", err)
	}
	if _, err := s.store.PurgeSessions(ctx, s.cfg.PurgeBatch); err != nil {
		return fmt.Errorf("purge expired console sessions: %w", err)
	}
	if err := s.applyRetention(ctx); err != nil {
		return fmt.Errorf("apply retention: %w", err)
	}
	return nil
}

// maxPurgeBatchesPerSweep bounds one sweep's share of a large backlog; the next sweep goes on.
const maxPurgeBatchesPerSweep = 100

// applyRetention deletes due parts of ended deployments, one bounded transaction after another,
// so requests get the database's write lock between batches.
func (s *Server) applyRetention(ctx context.Context) error {
	if due, err := s.store.PurgeDue(ctx, s.cfg.Retention); err != nil || !due {
		return err
	}
	var total store.Purged
	for range maxPurgeBatchesPerSweep {
		done, more, err := s.store.PurgeBatch(ctx, s.cfg.Retention, s.cfg.PurgeBatch)
		total.Add(done)
		s.metrics.countPurged(done)
		if err != nil {
			return err
		}
		if !more {
			break
		}
	}
	if total != (store.Purged{}) {
		s.log.Info("retention purged ended deployments' data", "sources", total.Sources, "logs", total.Logs, "deployments", total.Deployments)
	}
	return nil
}

// sweepLoop runs Sweep every interval until stop is closed.
func (s *Server) sweepLoop(interval time.Duration, stop <-chan struct{}, done chan<- struct{}) {
	defer close(done)
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
			ctx, cancel := context.WithTimeout(context.Background(), interval*4)
			if err := s.Sweep(ctx); err != nil {
				s.log.Error("sweep failed", "err", err)
			}
			cancel()
		}
	}
}
