package bolt

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/outpost-dev/terraform-provider-outpost/internal/api"
	"github.com/outpost-dev/terraform-provider-outpost/internal/orchestrator/store"
)

// Deployments in bbolt: the record in bDeployments, and indexes that saveDeployment keeps in
// line with it (list order, queue, leases, status counters, purge indexes), since bbolt can only
// look records up by key.

// LoadDeployment implements store.Tx.
func (t Tx) LoadDeployment(org, id string) (*store.DeploymentRecord, bool, error) {
	var rec store.DeploymentRecord
	ok, err := getJSON(t.tx.Bucket(BucketDeployments), key(org, id), &rec)
	if err != nil || !ok {
		return nil, false, err
	}
	rec.MarkSaved()
	return &rec, true, nil
}

// InsertDeployment implements store.Tx.
func (t Tx) InsertDeployment(rec *store.DeploymentRecord) error {
	deployments := t.tx.Bucket(BucketDeployments)
	seq, err := deployments.NextSequence()
	if err != nil {
		return err
	}
	rec.Seq = seq
	if err := t.tx.Bucket(bDeploymentSeq).Put(append(prefix(rec.Org), u64(seq)...), []byte(rec.D.ID)); err != nil {
		return err
	}
	return t.SaveDeployment(rec)
}

func queueKey(rec *store.DeploymentRecord) []byte {
	return append(prefix(rec.Org, rec.D.RunnerID), u64(rec.Seq)...)
}

// SaveDeployment implements store.Tx.
func (t Tx) SaveDeployment(rec *store.DeploymentRecord) error {
	tx := t.tx
	if err := putJSON(tx.Bucket(BucketDeployments), key(rec.Org, rec.D.ID), rec); err != nil {
		return err
	}
	queue, leased := tx.Bucket(bQueue), tx.Bucket(bLeased)
	savedStatus, savedLeased := rec.Saved()
	wasQueued, isQueued := savedStatus == api.StatusQueued, rec.D.Status == api.StatusQueued
	switch {
	case isQueued && !wasQueued:
		if err := queue.Put(queueKey(rec), []byte(rec.D.ID)); err != nil {
			return err
		}
	case wasQueued && !isQueued:
		if err := queue.Delete(queueKey(rec)); err != nil {
			return err
		}
	}
	leaseKey := key(rec.Org, rec.D.RunnerID, rec.D.ID)
	switch isLeased := rec.Lease != nil; {
	case isLeased && !savedLeased:
		if err := leased.Put(leaseKey, nil); err != nil {
			return err
		}
	case savedLeased && !isLeased:
		if err := leased.Delete(leaseKey); err != nil {
			return err
		}
	}
	if savedStatus != rec.D.Status {
		if !savedStatus.Terminal() && rec.D.Status.Terminal() && rec.D.FinishedAt != nil {
			if err := indexEnded(tx, rec); err != nil {
				return err
			}
		}
		if err := addStat(tx, savedStatus, -1); err != nil {
			return err
		}
		if err := addStat(tx, rec.D.Status, 1); err != nil {
			return err
		}
	}
	rec.MarkSaved()
	return nil
}

func addStat(tx *bolt.Tx, status api.Status, delta int64) error {
	if status == "" {
		return nil
	}
	b := tx.Bucket(bStats)
	var n int64
	if v := b.Get([]byte(status)); len(v) == 8 {
		n = int64(binary.BigEndian.Uint64(v))
	}
	n += delta
	if n < 0 {
		n = 0
	}
	return b.Put([]byte(status), u64(uint64(n)))
}

// DeleteDeployment implements store.Tx.
func (t Tx) DeleteDeployment(rec *store.DeploymentRecord) error {
	k := key(rec.Org, rec.D.ID)
	dels := []struct {
		b []byte
		k []byte
	}{
		{BucketSources, k}, {BucketOutputs, k}, {bDeploymentSeq, append(prefix(rec.Org), u64(rec.Seq)...)},
		{bPurgeSources, purgeKey(rec)}, {bPurgeLogs, purgeKey(rec)}, {BucketDeployments, k},
	}
	for _, d := range dels {
		if err := t.tx.Bucket(d.b).Delete(d.k); err != nil {
			return err
		}
	}
	return addStat(t.tx, rec.D.Status, -1)
}

// ListDeployments implements store.Tx.
func (t Tx) ListDeployments(org, runnerID string, status api.Status, each func(rec *store.DeploymentRecord) (bool, error)) error {
	return scanPrefixReverse(t.tx.Bucket(bDeploymentSeq), prefix(org), func(_, v []byte) (bool, error) {
		rec, found, err := t.LoadDeployment(org, string(v))
		if err != nil {
			return false, err
		}
		if !found {
			return false, fmt.Errorf("index entry for missing deployment %s/%s", org, v)
		}
		if (runnerID != "" && rec.D.RunnerID != runnerID) || (status != "" && rec.D.Status != status) {
			return true, nil
		}
		return each(rec)
	})
}

// CountQueued implements store.Tx.
func (t Tx) CountQueued(org string, most int) (int, error) {
	n := 0
	err := scanPrefix(t.tx.Bucket(bQueue), prefix(org), func(_, _ []byte) (bool, error) {
		n++
		return n < most, nil
	})
	return n, err
}

// CountRunnerQueue implements store.Tx.
func (t Tx) CountRunnerQueue(org, runner string, most int) (int, error) {
	n := 0
	if most <= 0 {
		return 0, nil
	}
	err := scanPrefix(t.tx.Bucket(bQueue), prefix(org, runner), func(_, _ []byte) (bool, error) {
		n++
		return n < most, nil
	})
	return n, err
}

// QueueDepths implements store.Tx. Queue keys are org/runner/ and an 8-byte sequence number, in
// key order, so each runner's entries are one run.
func (t Tx) QueueDepths() ([]store.QueueDepth, error) {
	var out []store.QueueDepth
	err := t.tx.Bucket(bQueue).ForEach(func(k, _ []byte) error {
		if len(k) < 9 {
			return nil
		}
		org, runner, ok := bytes.Cut(k[:len(k)-9], []byte("/"))
		if !ok {
			return nil
		}
		if n := len(out); n > 0 && out[n-1].Org == string(org) && out[n-1].Runner == string(runner) {
			out[n-1].Queued++
			return nil
		}
		out = append(out, store.QueueDepth{Org: string(org), Runner: string(runner), Queued: 1})
		return nil
	})
	return out, err
}

// Queued implements store.Tx.
func (t Tx) Queued(org, runner string, limit int) ([]string, error) {
	var out []string
	if limit <= 0 {
		return nil, nil
	}
	err := scanPrefix(t.tx.Bucket(bQueue), prefix(org, runner), func(_, v []byte) (bool, error) {
		out = append(out, string(v))
		return len(out) < limit, nil
	})
	return out, err
}

// Leased implements store.Tx.
func (t Tx) Leased(org, runner string) ([]string, error) {
	var out []string
	p := prefix(org, runner)
	err := scanPrefix(t.tx.Bucket(bLeased), p, func(k, _ []byte) (bool, error) {
		out = append(out, string(k[len(p):]))
		return true, nil
	})
	return out, err
}

// ExpiredLeases implements store.Tx.
func (t Tx) ExpiredLeases(now time.Time) ([]store.LeaseRef, error) {
	var (
		due  []store.LeaseRef
		dead [][]byte
	)
	err := t.tx.Bucket(bLeased).ForEach(func(k, _ []byte) error {
		parts := bytes.Split(k, []byte("/"))
		if len(parts) != 3 {
			return nil
		}
		ref := store.LeaseRef{Org: string(parts[0]), Runner: string(parts[1]), Deployment: string(parts[2])}
		var rec store.DeploymentRecord
		found, err := getJSON(t.tx.Bucket(BucketDeployments), key(ref.Org, ref.Deployment), &rec)
		if err != nil {
			return err
		}
		if !found {
			dead = append(dead, bytes.Clone(k))
			return nil
		}
		if rec.Lease == nil || !now.Before(rec.Lease.ExpiresAt) {
			due = append(due, ref)
		}
		return nil
	})
	if err != nil || !t.tx.Writable() {
		return due, err
	}
	// An index entry without its deployment cannot be settled; drop it.
	for _, k := range dead {
		if err := t.tx.Bucket(bLeased).Delete(k); err != nil {
			return nil, err
		}
	}
	return due, nil
}

// StatusCounts implements store.Tx.
func (t Tx) StatusCounts() (map[api.Status]int64, error) {
	out := map[api.Status]int64{}
	err := t.tx.Bucket(bStats).ForEach(func(k, v []byte) error {
		if len(v) == 8 {
			out[api.Status(k)] = int64(binary.BigEndian.Uint64(v))
		}
		return nil
	})
	return out, err
}
