package store

import (
	"context"
	"time"
)

// Retention of ended deployments. The engine keeps, per part that retention deletes, the ended
// deployments whose part is still there in end-time order (nextDue), so a purge pass starts at
// the oldest and stops at the first one not yet due: a sweep that finds nothing costs three
// index lookups, and one that finds a backlog works through it in transactions of a bounded
// number of deletions (purgeBatch), letting requests in between.

// Defaults of Retention, counted from a deployment's end.
const (
	// DefaultSourceRetention is short: sources and variables can hold secrets, and nothing needs
	// them once the attempt's job runner is done.
	DefaultSourceRetention     = time.Hour
	DefaultLogRetention        = 30 * 24 * time.Hour
	DefaultDeploymentRetention = 90 * 24 * time.Hour
	// KeepForever, as a Retention field, keeps that part of ended deployments for good.
	KeepForever time.Duration = -1
)

// Retention says how long the parts of an ended deployment are kept, counted from its end. The
// background sweep deletes what is due in bounded batches. Zero fields take the defaults;
// KeepForever (any negative value) keeps that part.
type Retention struct {
	// Sources is how long the source and the variables are kept.
	Sources time.Duration
	// Logs is how long the log and the events are kept; at least JobTokenGrace, so the job
	// runner's last lines cannot land after the purge.
	Logs time.Duration
	// Deployments is how long the deployment itself (with its outputs) is kept; after that it
	// is gone, and reads of it get 404.
	Deployments time.Duration
}

// WithDefaults fills zero fields with the defaults and makes every negative one KeepForever.
func (r Retention) WithDefaults() Retention {
	set := func(d *time.Duration, def time.Duration) {
		switch {
		case *d == 0:
			*d = def
		case *d < 0:
			*d = KeepForever
		}
	}
	set(&r.Sources, DefaultSourceRetention)
	set(&r.Logs, DefaultLogRetention)
	set(&r.Deployments, DefaultDeploymentRetention)
	return r
}

// Purged counts what one purge deleted: deployments whose source (and variables), log (and
// events), or whole record went.
type Purged struct {
	Sources, Logs, Deployments int
}

// Add adds q's counts to p.
func (p *Purged) Add(q Purged) {
	p.Sources += q.Sources
	p.Logs += q.Logs
	p.Deployments += q.Deployments
}

// purgeStage is one part of ended deployments that retention deletes.
type purgeStage struct {
	kind PurgeStageKind
	keep time.Duration // negative: kept forever
	// purge deletes the part of rec within budget records and reports how many it deleted and
	// whether it finished (false: the budget ran out first).
	purge func(tx Tx, rec *DeploymentRecord, now time.Time, budget int) (int, bool, error)
	count func(p *Purged)
}

func purgeStages(r Retention) []purgeStage {
	return []purgeStage{
		{PurgeDeployments, r.Deployments, purgeDeployment, func(p *Purged) { p.Deployments++ }},
		{PurgeLogsStage, r.Logs, purgeLogs, func(p *Purged) { p.Logs++ }},
		{PurgeSources, r.Sources, purgeSource, func(p *Purged) { p.Sources++ }},
	}
}

// PurgeDue reports whether any stage has an entry due, in a read transaction, so that a sweep
// with nothing to do takes no write lock.
func (s *Store) PurgeDue(ctx context.Context, r Retention) (bool, error) {
	now := s.TimeNow()
	due := false
	err := s.view(ctx, func(tx Tx) error {
		due = false
		for _, st := range purgeStages(r) {
			if st.keep < 0 {
				continue
			}
			_, ok, err := tx.NextDue(st.kind, now.Add(-st.keep))
			if err != nil {
				return err
			}
			due = due || ok
		}
		return nil
	})
	return due, err
}

// PurgeBatch deletes due parts of ended deployments in one write transaction of at most about
// budget deleted records. more says that the budget ran out with work left.
func (s *Store) PurgeBatch(ctx context.Context, r Retention, budget int) (done Purged, more bool, err error) {
	err = s.Update(ctx, func(tx Tx) error {
		done, more = Purged{}, false
		now := s.TimeNow()
		left := budget
		for _, st := range purgeStages(r) {
			if st.keep < 0 {
				continue
			}
			for {
				if left <= 0 {
					more = true
					return nil
				}
				e, ok, err := tx.NextDue(st.kind, now.Add(-st.keep))
				if err != nil {
					return err
				}
				if !ok {
					break
				}
				rec, found, err := tx.LoadDeployment(e.Org, e.ID)
				if err != nil {
					return err
				}
				if !found {
					// Already gone (purged whole before this part came due).
					left--
					if err := tx.DropDue(st.kind, e); err != nil {
						return err
					}
					continue
				}
				n, finished, err := st.purge(tx, rec, now, left)
				if err != nil {
					return err
				}
				left -= n + 1
				if !finished {
					more = true
					return nil
				}
				if err := tx.DropDue(st.kind, e); err != nil {
					return err
				}
				st.count(&done)
			}
		}
		return nil
	})
	return done, more, err
}

// purgeSource deletes a deployment's source and variables, which can hold secrets.
func purgeSource(tx Tx, rec *DeploymentRecord, now time.Time, _ int) (int, bool, error) {
	if err := tx.DeleteDoc(KindSource, rec.Org, rec.D.ID); err != nil {
		return 0, false, err
	}
	rec.D.Variables = nil
	rec.D.SourcePurgedAt = &now
	return 1, true, tx.SaveDeployment(rec)
}

// purgeLogs deletes a deployment's log and events.
func purgeLogs(tx Tx, rec *DeploymentRecord, now time.Time, budget int) (int, bool, error) {
	n, finished, err := tx.DeleteLogs(rec.Org, rec.D.ID, budget)
	if err != nil || !finished {
		return n, finished, err
	}
	m, finished, err := tx.DeleteEvents(rec.Org, rec.D.ID, budget-n)
	if err != nil || !finished {
		return n + m, finished, err
	}
	rec.D.LogSize, rec.D.LogTruncated = 0, false
	rec.D.LogsPurgedAt = &now
	return n + m, true, tx.SaveDeployment(rec)
}

// purgeDeployment deletes a deployment with everything it left: source, log, events, outputs,
// its place in the list, its status count and its entries in the other purge indexes.
func purgeDeployment(tx Tx, rec *DeploymentRecord, now time.Time, budget int) (int, bool, error) {
	n, finished, err := purgeLogs(tx, rec, now, budget)
	if err != nil || !finished {
		return n, finished, err
	}
	if err := tx.DeleteDoc(KindPlan, rec.Org, rec.D.ID); err != nil {
		return n, false, err
	}
	return n + 7, true, tx.DeleteDeployment(rec)
}
