package orchestrator

import (
	"bytes"
	"encoding/binary"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/outpost-dev/terraform-provider-outpost/internal/api"
)

// Events, logs and retention's purge indexes in bbolt.

func eventKey(org, deploymentID string, attempt int, seq int64) []byte {
	k := prefix(org, deploymentID)
	k = binary.BigEndian.AppendUint32(k, uint32(attempt))
	return binary.BigEndian.AppendUint64(k, uint64(seq))
}

func (t boltTx) hasEvent(org, deployment string, attempt int, seq int64) (bool, error) {
	return t.tx.Bucket(bEvents).Get(eventKey(org, deployment, attempt, seq)) != nil, nil
}

func (t boltTx) putEvent(org, deployment string, attempt int, seq int64, ev api.Event) error {
	return putJSON(t.tx.Bucket(bEvents), eventKey(org, deployment, attempt, seq), ev)
}

func (t boltTx) countEvents(org, deployment string, attempt, most int) (int, error) {
	n := 0
	p := binary.BigEndian.AppendUint32(prefix(org, deployment), uint32(attempt))
	err := scanPrefix(t.tx.Bucket(bEvents), p, func(_, _ []byte) (bool, error) {
		n++
		return n < most, nil
	})
	return n, err
}

func (t boltTx) listEvents(org, deployment string) ([]api.Event, error) {
	out := []api.Event{}
	err := scanPrefix(t.tx.Bucket(bEvents), prefix(org, deployment), func(_, v []byte) (bool, error) {
		var ev api.Event
		if err := unmarshal(v, &ev); err != nil {
			return false, err
		}
		out = append(out, ev)
		return true, nil
	})
	return out, err
}

func (t boltTx) deleteEvents(org, deployment string, budget int) (int, bool, error) {
	return deletePrefix(t.tx.Bucket(bEvents), prefix(org, deployment), budget)
}

func logKey(org, deployment string, stored int64) []byte {
	return append(prefix(org, deployment), u64(uint64(stored))...)
}

func (t boltTx) putLogChunk(org, deployment string, start int64, b []byte) error {
	return t.tx.Bucket(bLogs).Put(logKey(org, deployment, start), b)
}

func (t boltTx) lastLogByte(org, deployment string) (byte, error) {
	var last byte
	err := scanPrefixReverse(t.tx.Bucket(bLogs), prefix(org, deployment), func(_, v []byte) (bool, error) {
		if len(v) > 0 {
			last = v[len(v)-1]
		}
		return false, nil
	})
	return last, err
}

func (t boltTx) readLog(org, deployment string, offset, limit int64) ([]byte, error) {
	out := []byte{}
	p := prefix(org, deployment)
	c := t.tx.Bucket(bLogs).Cursor()
	k, v := c.Seek(logKey(org, deployment, offset))
	switch {
	case k == nil:
		k, v = c.Last()
	case !bytes.HasPrefix(k, p) || chunkStart(k, p) > offset:
		k, v = c.Prev()
	}
	for ; k != nil && bytes.HasPrefix(k, p) && int64(len(out)) < limit; k, v = c.Next() {
		start := chunkStart(k, p)
		if start+int64(len(v)) <= offset {
			continue
		}
		from := max(offset-start, 0)
		take := min(int64(len(v))-from, limit-int64(len(out)))
		out = append(out, v[from:from+take]...)
	}
	return out, nil
}

func chunkStart(k, p []byte) int64 {
	if len(k) != len(p)+8 {
		return -1
	}
	return int64(binary.BigEndian.Uint64(k[len(p):]))
}

func (t boltTx) deleteLogs(org, deployment string, budget int) (int, bool, error) {
	return deletePrefix(t.tx.Bucket(bLogs), prefix(org, deployment), budget)
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

// Retention's purge indexes: when a deployment ends, saveDeployment puts it into three purge
// indexes, one per part that retention deletes, keyed by the end time (big-endian unix
// nanoseconds) and "org/id", so a purge pass reads each index from its oldest entry and stops at
// the first one not yet due.
var (
	bPurgeSources     = []byte("purge_sources")     // end time + org/id → "" (source and variables not yet purged)
	bPurgeLogs        = []byte("purge_logs")        // end time + org/id → "" (log and events not yet purged)
	bPurgeDeployments = []byte("purge_deployments") // end time + org/id → "" (deployment not yet purged)

	purgeBuckets = map[purgeStageKind][]byte{
		purgeDeployments: bPurgeDeployments, purgeLogsStage: bPurgeLogs, purgeSources: bPurgeSources,
	}
)

// metaEndedIndexed marks a database whose ended deployments are all in the purge indexes.
var metaEndedIndexed = []byte("ended_indexed")

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

func (t boltTx) nextDue(stage purgeStageKind, cutoff time.Time) (dueEntry, bool, error) {
	k, _ := t.tx.Bucket(purgeBuckets[stage]).Cursor().First()
	if len(k) <= 8 || bytes.Compare(k[:8], u64(uint64(cutoff.UnixNano()))) > 0 {
		return dueEntry{}, false, nil
	}
	k = bytes.Clone(k)
	org, id, _ := bytes.Cut(k[8:], []byte("/"))
	return dueEntry{org: string(org), id: string(id), key: k}, true, nil
}

func (t boltTx) dropDue(stage purgeStageKind, e dueEntry) error {
	return t.tx.Bucket(purgeBuckets[stage]).Delete(e.key)
}
