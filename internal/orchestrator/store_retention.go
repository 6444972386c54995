package orchestrator

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

func (r Retention) withDefaults() Retention {
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

// purged counts what one purge deleted: deployments whose source (and variables), log (and
// events), or whole record went.
type purged struct {
	sources, logs, deployments int
}

func (p *purged) add(q purged) {
	p.sources += q.sources
	p.logs += q.logs
	p.deployments += q.deployments
}

// purgeStage is one part of ended deployments that retention deletes.
type purgeStage struct {
	kind purgeStageKind
	keep time.Duration // negative: kept forever
	// purge deletes the part of rec within budget records and reports how many it deleted and
	// whether it finished (false: the budget ran out first).
	purge func(tx storeTx, rec *deploymentRecord, now time.Time, budget int) (int, bool, error)
	count func(p *purged)
}

func purgeStages(r Retention) []purgeStage {
	return []purgeStage{
		{purgeDeployments, r.Deployments, purgeDeployment, func(p *purged) { p.deployments++ }},
		{purgeLogsStage, r.Logs, purgeLogs, func(p *purged) { p.logs++ }},
		{purgeSources, r.Sources, purgeSource, func(p *purged) { p.sources++ }},
	}
}

// purgeDue reports whether any stage has an entry due, in a read transaction, so that a sweep
// with nothing to do takes no write lock.
func (s *store) purgeDue(ctx context.Context, r Retention) (bool, error) {
	now := s.timeNow()
	due := false
	err := s.view(ctx, func(tx storeTx) error {
		due = false
		for _, st := range purgeStages(r) {
			if st.keep < 0 {
				continue
			}
			_, ok, err := tx.nextDue(st.kind, now.Add(-st.keep))
			if err != nil {
				return err
			}
			due = due || ok
		}
		return nil
	})
	return due, err
}

// purgeBatch deletes due parts of ended deployments in one write transaction of at most about
// budget deleted records. more says that the budget ran out with work left.
func (s *store) purgeBatch(ctx context.Context, r Retention, budget int) (done purged, more bool, err error) {
	err = s.update(ctx, func(tx storeTx) error {
		done, more = purged{}, false
		now := s.timeNow()
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
				e, ok, err := tx.nextDue(st.kind, now.Add(-st.keep))
				if err != nil {
					return err
				}
				if !ok {
					break
				}
				rec, found, err := tx.loadDeployment(e.org, e.id)
				if err != nil {
					return err
				}
				if !found {
					// Already gone (purged whole before this part came due).
					left--
					if err := tx.dropDue(st.kind, e); err != nil {
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
				if err := tx.dropDue(st.kind, e); err != nil {
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
func purgeSource(tx storeTx, rec *deploymentRecord, now time.Time, _ int) (int, bool, error) {
	if err := tx.deleteDoc(kindSource, rec.Org, rec.D.ID); err != nil {
		return 0, false, err
	}
	rec.D.Variables = nil
	rec.D.SourcePurgedAt = &now
	return 1, true, tx.saveDeployment(rec)
}

// purgeLogs deletes a deployment's log and events.
func purgeLogs(tx storeTx, rec *deploymentRecord, now time.Time, budget int) (int, bool, error) {
	n, finished, err := tx.deleteLogs(rec.Org, rec.D.ID, budget)
	if err != nil || !finished {
		return n, finished, err
	}
	m, finished, err := tx.deleteEvents(rec.Org, rec.D.ID, budget-n)
	if err != nil || !finished {
		return n + m, finished, err
	}
	rec.D.LogSize, rec.D.LogTruncated = 0, false
	rec.D.LogsPurgedAt = &now
	return n + m, true, tx.saveDeployment(rec)
}

// purgeDeployment deletes a deployment with everything it left: source, log, events, outputs,
// its place in the list, its status count and its entries in the other purge indexes.
func purgeDeployment(tx storeTx, rec *deploymentRecord, now time.Time, budget int) (int, bool, error) {
	n, finished, err := purgeLogs(tx, rec, now, budget)
	if err != nil || !finished {
		return n, finished, err
	}
	return n + 6, true, tx.deleteDeployment(rec)
}
