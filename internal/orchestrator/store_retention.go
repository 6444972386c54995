package orchestrator

import (
	"bytes"
	"context"
	"time"

	bolt "go.etcd.io/bbolt"
)

// Retention of ended deployments. When a deployment ends, finishDeployment puts it into three
// purge indexes, one per part that retention deletes, keyed by the end time (big-endian unix
// nanoseconds) and "org/id". A purge pass reads each index from its oldest entry and stops at
// the first one not yet due, so a sweep that finds nothing costs three cursor seeks, and one
// that finds a backlog works through it in transactions of a bounded number of deletions
// (purgeBatch), letting requests in between.

var (
	bPurgeSources     = []byte("purge_sources")     // end time + org/id → "" (source and variables not yet purged)
	bPurgeLogs        = []byte("purge_logs")        // end time + org/id → "" (log and events not yet purged)
	bPurgeDeployments = []byte("purge_deployments") // end time + org/id → "" (deployment not yet purged)

	purgeBuckets = [][]byte{bPurgeDeployments, bPurgeLogs, bPurgeSources}
)

// metaEndedIndexed marks a database whose ended deployments are all in the purge indexes.
var metaEndedIndexed = []byte("ended_indexed")

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

func purgeKey(rec *deploymentRecord) []byte {
	return append(u64(uint64(rec.D.FinishedAt.UnixNano())), key(rec.Org, rec.D.ID)...)
}

// indexEnded puts a deployment that just ended into the purge indexes.
func indexEnded(tx *bolt.Tx, rec *deploymentRecord) error {
	k := purgeKey(rec)
	for _, b := range purgeBuckets {
		if err := tx.Bucket(b).Put(k, nil); err != nil {
			return err
		}
	}
	return nil
}

// backfillEndedIndex indexes the deployments that ended before the purge indexes existed, once
// per database.
func backfillEndedIndex(tx *bolt.Tx) error {
	meta := tx.Bucket(bMeta)
	if meta.Get(metaEndedIndexed) != nil {
		return nil
	}
	err := tx.Bucket(bDeployments).ForEach(func(_, v []byte) error {
		var rec deploymentRecord
		if err := unmarshal(v, &rec); err != nil {
			return err
		}
		if !rec.D.Status.Terminal() || rec.D.FinishedAt == nil {
			return nil
		}
		return indexEnded(tx, &rec)
	})
	if err != nil {
		return err
	}
	return meta.Put(metaEndedIndexed, []byte{1})
}

// purgeStage is one part of ended deployments that retention deletes.
type purgeStage struct {
	bucket []byte
	keep   time.Duration // negative: kept forever
	// purge deletes the part of rec within budget keys and reports how many it deleted and
	// whether it finished (false: the budget ran out first).
	purge func(tx *bolt.Tx, rec *deploymentRecord, now time.Time, budget int) (int, bool, error)
	count func(p *purged)
}

func purgeStages(r Retention) []purgeStage {
	return []purgeStage{
		{bPurgeDeployments, r.Deployments, purgeDeployment, func(p *purged) { p.deployments++ }},
		{bPurgeLogs, r.Logs, purgeLogs, func(p *purged) { p.logs++ }},
		{bPurgeSources, r.Sources, purgeSource, func(p *purged) { p.sources++ }},
	}
}

// dueBefore is the end time up to which a stage is due now, as an index key prefix.
func dueBefore(now time.Time, keep time.Duration) []byte {
	return u64(uint64(now.Add(-keep).UnixNano()))
}

// purgeDue reports whether any stage has an entry due, in a read transaction, so that a sweep
// with nothing to do takes no write lock.
func (s *store) purgeDue(ctx context.Context, r Retention) (bool, error) {
	now := s.timeNow()
	due := false
	err := s.view(ctx, func(tx *bolt.Tx) error {
		for _, st := range purgeStages(r) {
			if st.keep < 0 {
				continue
			}
			k, _ := tx.Bucket(st.bucket).Cursor().First()
			if len(k) > 8 && bytes.Compare(k[:8], dueBefore(now, st.keep)) <= 0 {
				due = true
			}
		}
		return nil
	})
	return due, err
}

// purgeBatch deletes due parts of ended deployments in one write transaction of at most about
// budget deleted keys. more says that the budget ran out with work left.
func (s *store) purgeBatch(ctx context.Context, r Retention, budget int) (done purged, more bool, err error) {
	err = s.update(ctx, func(tx *bolt.Tx) error {
		done, more = purged{}, false
		now := s.timeNow()
		left := budget
		for _, st := range purgeStages(r) {
			if st.keep < 0 {
				continue
			}
			limit := dueBefore(now, st.keep)
			idx := tx.Bucket(st.bucket)
			for {
				if left <= 0 {
					more = true
					return nil
				}
				k, _ := idx.Cursor().First()
				if len(k) <= 8 || bytes.Compare(k[:8], limit) > 0 {
					break
				}
				k = bytes.Clone(k)
				org, id, _ := bytes.Cut(k[8:], []byte("/"))
				rec, err := loadDeployment(tx, string(org), string(id))
				if _, refused := asRefusal(err); refused {
					// Already gone (purged whole before this part came due).
					left--
					if err := idx.Delete(k); err != nil {
						return err
					}
					continue
				}
				if err != nil {
					return err
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
				if err := idx.Delete(k); err != nil {
					return err
				}
				st.count(&done)
			}
		}
		return nil
	})
	return done, more, err
}

// deletePrefix deletes up to budget keys under p; finished when none is left.
func deletePrefix(b *bolt.Bucket, p []byte, budget int) (int, bool, error) {
	var keys [][]byte
	finished := true
	if err := scanPrefix(b, p, func(k, _ []byte) (bool, error) {
		if len(keys) == budget {
			finished = false
			return false, nil
		}
		keys = append(keys, bytes.Clone(k))
		return true, nil
	}); err != nil {
		return 0, false, err
	}
	for _, k := range keys {
		if err := b.Delete(k); err != nil {
			return 0, false, err
		}
	}
	return len(keys), finished, nil
}

// purgeSource deletes a deployment's source and variables, which can hold secrets.
func purgeSource(tx *bolt.Tx, rec *deploymentRecord, now time.Time, _ int) (int, bool, error) {
	if err := tx.Bucket(bSources).Delete(key(rec.Org, rec.D.ID)); err != nil {
		return 0, false, err
	}
	rec.D.Variables = nil
	rec.D.SourcePurgedAt = &now
	return 1, true, saveDeployment(tx, rec)
}

// purgeLogs deletes a deployment's log and events.
func purgeLogs(tx *bolt.Tx, rec *deploymentRecord, now time.Time, budget int) (int, bool, error) {
	n, finished, err := deletePrefix(tx.Bucket(bLogs), prefix(rec.Org, rec.D.ID), budget)
	if err != nil || !finished {
		return n, finished, err
	}
	m, finished, err := deletePrefix(tx.Bucket(bEvents), prefix(rec.Org, rec.D.ID), budget-n)
	if err != nil || !finished {
		return n + m, finished, err
	}
	rec.D.LogSize, rec.D.LogTruncated = 0, false
	rec.D.LogsPurgedAt = &now
	return n + m, true, saveDeployment(tx, rec)
}

// purgeDeployment deletes a deployment with everything it left: source, log, events, outputs,
// its place in the list, its status count and its entries in the other purge indexes.
func purgeDeployment(tx *bolt.Tx, rec *deploymentRecord, now time.Time, budget int) (int, bool, error) {
	n, finished, err := purgeLogs(tx, rec, now, budget)
	if err != nil || !finished {
		return n, finished, err
	}
	k := key(rec.Org, rec.D.ID)
	dels := []struct {
		b []byte
		k []byte
	}{
		{bSources, k}, {bOutputs, k}, {bDeploymentSeq, append(prefix(rec.Org), u64(rec.Seq)...)},
		{bPurgeSources, purgeKey(rec)}, {bPurgeLogs, purgeKey(rec)}, {bDeployments, k},
	}
	for _, d := range dels {
		if err := tx.Bucket(d.b).Delete(d.k); err != nil {
			return 0, false, err
		}
	}
	return n + len(dels), true, addStat(tx, rec.D.Status, -1)
}
