package bolt

import (
	"bytes"
	"encoding/binary"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/outpost-dev/terraform-provider-outpost/internal/api"
	"github.com/outpost-dev/terraform-provider-outpost/internal/orchestrator/store"
)

// Events, logs and retention's purge indexes in bbolt.

func eventKey(org, deploymentID string, attempt int, seq int64) []byte {
	k := prefix(org, deploymentID)
	k = binary.BigEndian.AppendUint32(k, uint32(attempt))
	return binary.BigEndian.AppendUint64(k, uint64(seq))
}

// HasEvent implements store.Tx.
func (t Tx) HasEvent(org, deployment string, attempt int, seq int64) (bool, error) {
	return t.tx.Bucket(BucketEvents).Get(eventKey(org, deployment, attempt, seq)) != nil, nil
}

// PutEvent implements store.Tx.
func (t Tx) PutEvent(org, deployment string, attempt int, seq int64, ev api.Event) error {
	return putJSON(t.tx.Bucket(BucketEvents), eventKey(org, deployment, attempt, seq), ev)
}

// CountEvents implements store.Tx.
func (t Tx) CountEvents(org, deployment string, attempt, most int) (int, error) {
	n := 0
	p := binary.BigEndian.AppendUint32(prefix(org, deployment), uint32(attempt))
	err := scanPrefix(t.tx.Bucket(BucketEvents), p, func(_, _ []byte) (bool, error) {
		n++
		return n < most, nil
	})
	return n, err
}

// ListEvents implements store.Tx.
func (t Tx) ListEvents(org, deployment string) ([]api.Event, error) {
	out := []api.Event{}
	err := scanPrefix(t.tx.Bucket(BucketEvents), prefix(org, deployment), func(_, v []byte) (bool, error) {
		var ev api.Event
		if err := store.Unmarshal(v, &ev); err != nil {
			return false, err
		}
		out = append(out, ev)
		return true, nil
	})
	return out, err
}

// DeleteEvents implements store.Tx.
func (t Tx) DeleteEvents(org, deployment string, budget int) (int, bool, error) {
	return deletePrefix(t.tx.Bucket(BucketEvents), prefix(org, deployment), budget)
}

func logKey(org, deployment string, stored int64) []byte {
	return append(prefix(org, deployment), u64(uint64(stored))...)
}

// PutLogChunk implements store.Tx.
func (t Tx) PutLogChunk(org, deployment string, start int64, b []byte) error {
	return t.tx.Bucket(BucketLogs).Put(logKey(org, deployment, start), b)
}

// LastLogByte implements store.Tx.
func (t Tx) LastLogByte(org, deployment string) (byte, error) {
	var last byte
	err := scanPrefixReverse(t.tx.Bucket(BucketLogs), prefix(org, deployment), func(_, v []byte) (bool, error) {
		if len(v) > 0 {
			last = v[len(v)-1]
		}
		return false, nil
	})
	return last, err
}

// ReadLog implements store.Tx.
func (t Tx) ReadLog(org, deployment string, offset, limit int64) ([]byte, error) {
	out := []byte{}
	p := prefix(org, deployment)
	c := t.tx.Bucket(BucketLogs).Cursor()
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

// DeleteLogs implements store.Tx.
func (t Tx) DeleteLogs(org, deployment string, budget int) (int, bool, error) {
	return deletePrefix(t.tx.Bucket(BucketLogs), prefix(org, deployment), budget)
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

	PurgeBuckets = map[store.PurgeStageKind][]byte{
		store.PurgeDeployments: bPurgeDeployments, store.PurgeLogsStage: bPurgeLogs, store.PurgeSources: bPurgeSources,
	}
)

// metaEndedIndexed marks a database whose ended deployments are all in the purge indexes.
var MetaEndedIndexed = []byte("ended_indexed")

func purgeKey(rec *store.DeploymentRecord) []byte {
	return append(u64(uint64(rec.D.FinishedAt.UnixNano())), key(rec.Org, rec.D.ID)...)
}

// indexEnded puts a deployment that just ended into the purge indexes.
func indexEnded(tx *bolt.Tx, rec *store.DeploymentRecord) error {
	k := purgeKey(rec)
	for _, b := range PurgeBuckets {
		if err := tx.Bucket(b).Put(k, nil); err != nil {
			return err
		}
	}
	return nil
}

// backfillEndedIndex indexes the deployments that ended before the purge indexes existed, once
// per database.
func backfillEndedIndex(tx *bolt.Tx) error {
	meta := tx.Bucket(BucketMeta)
	if meta.Get(MetaEndedIndexed) != nil {
		return nil
	}
	err := tx.Bucket(BucketDeployments).ForEach(func(_, v []byte) error {
		var rec store.DeploymentRecord
		if err := store.Unmarshal(v, &rec); err != nil {
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
	return meta.Put(MetaEndedIndexed, []byte{1})
}

// NextDue implements store.Tx.
func (t Tx) NextDue(stage store.PurgeStageKind, cutoff time.Time) (store.DueEntry, bool, error) {
	k, _ := t.tx.Bucket(PurgeBuckets[stage]).Cursor().First()
	if len(k) <= 8 || bytes.Compare(k[:8], u64(uint64(cutoff.UnixNano()))) > 0 {
		return store.DueEntry{}, false, nil
	}
	k = bytes.Clone(k)
	org, id, _ := bytes.Cut(k[8:], []byte("/"))
	return store.DueEntry{Org: string(org), ID: string(id), Key: k}, true, nil
}

// DropDue implements store.Tx.
func (t Tx) DropDue(stage store.PurgeStageKind, e store.DueEntry) error {
	return t.tx.Bucket(PurgeBuckets[stage]).Delete(e.Key)
}
