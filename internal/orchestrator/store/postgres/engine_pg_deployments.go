package postgres

import (
	"encoding/json"
	"fmt"
	"math"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/outpost-dev/terraform-provider-outpost/internal/api"
	"github.com/outpost-dev/terraform-provider-outpost/internal/orchestrator/store"
)

// Deployments, events, logs and retention in PostgreSQL. The queue, the leases, the status
// counts and the purge order are queries over columns that saveDeployment derives from the
// record, so there are no indexes of our own to keep in line.

// LoadDeployment implements store.Tx.
func (t *Tx) LoadDeployment(org, id string) (*store.DeploymentRecord, bool, error) {
	var data []byte
	ok, err := t.One("SELECT record FROM deployments WHERE org = $1 AND id = $2", []any{org, id}, &data)
	if err != nil || !ok {
		return nil, false, err
	}
	return DecodeDeployment(data)
}

// DecodeDeployment decodes a deployment record as stored (the same JSON in both engines), marked as saved.
func DecodeDeployment(data []byte) (*store.DeploymentRecord, bool, error) {
	var rec store.DeploymentRecord
	if err := store.Unmarshal(data, &rec); err != nil {
		return nil, true, err
	}
	rec.MarkSaved()
	return &rec, true, nil
}

// deploymentColumns are the record and what queries select by, derived from it.
func deploymentColumns(rec *store.DeploymentRecord) ([]any, error) {
	data, err := json.Marshal(rec)
	if err != nil {
		return nil, fmt.Errorf("encode deployment %s/%s: %w", rec.Org, rec.D.ID, err)
	}
	var leaseExp, finished *int64
	if rec.Lease != nil {
		v := rec.Lease.ExpiresAt.UnixNano()
		leaseExp = &v
	}
	if rec.D.Status.Terminal() && rec.D.FinishedAt != nil {
		v := rec.D.FinishedAt.UnixNano()
		finished = &v
	}
	return []any{rec.Org, rec.D.ID, int64(rec.Seq), rec.D.RunnerID, string(rec.D.Status), leaseExp, finished,
		rec.D.SourcePurgedAt != nil, rec.D.LogsPurgedAt != nil, data}, nil
}

// InsertDeployment implements store.Tx.
func (t *Tx) InsertDeployment(rec *store.DeploymentRecord) error {
	var seq int64
	if _, err := t.One("SELECT nextval('deployment_seq')", nil, &seq); err != nil {
		return err
	}
	rec.Seq = uint64(seq)
	return t.SaveDeployment(rec)
}

// SaveDeployment implements store.Tx.
func (t *Tx) SaveDeployment(rec *store.DeploymentRecord) error {
	cols, err := deploymentColumns(rec)
	if err != nil {
		return err
	}
	err = t.Exec(`INSERT INTO deployments (org, id, seq, runner_id, status, lease_expires_ns, finished_ns, source_purged, logs_purged, record)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)
		ON CONFLICT (org, id) DO UPDATE SET status = excluded.status, lease_expires_ns = excluded.lease_expires_ns,
			finished_ns = excluded.finished_ns, source_purged = excluded.source_purged, logs_purged = excluded.logs_purged,
			record = excluded.record`, cols...)
	if err != nil {
		return err
	}
	rec.MarkSaved()
	return nil
}

// DeleteDeployment deletes the record; its source, outputs, events and log go with it
// (ON DELETE CASCADE).
func (t *Tx) DeleteDeployment(rec *store.DeploymentRecord) error {
	return t.Exec("DELETE FROM deployments WHERE org = $1 AND id = $2", rec.Org, rec.D.ID)
}

// listBatch is how many deployments ListDeployments reads per query: a reader that stops early
// (a page of the console's list) costs one or two batches, not the organisation's whole history.
const listBatch = 200

// ListDeployments implements store.Tx. It reads newest first in batches along the (org, seq)
// index, each starting below the last seq seen, so it stops reading when each does.
func (t *Tx) ListDeployments(org, runnerID string, status api.Status, each func(rec *store.DeploymentRecord) (bool, error)) error {
	type row struct {
		Seq    int64
		Record []byte
	}
	below := int64(math.MaxInt64)
	for {
		rows, err := t.tx.Query(t.ctx, `SELECT seq, record FROM deployments WHERE org = $1
			AND ($2 = '' OR runner_id = $2) AND ($3 = '' OR status = $3) AND seq < $4 ORDER BY seq DESC LIMIT $5`,
			org, runnerID, string(status), below, listBatch)
		if err != nil {
			return err
		}
		batch, err := pgx.CollectRows(rows, pgx.RowToStructByPos[row])
		if err != nil {
			return err
		}
		for _, r := range batch {
			rec, _, err := DecodeDeployment(r.Record)
			if err != nil {
				return err
			}
			if more, err := each(rec); err != nil || !more {
				return err
			}
			below = r.Seq
		}
		if len(batch) < listBatch {
			return nil
		}
	}
}

// queued reads the queue oldest first. FOR UPDATE SKIP LOCKED passes over deployments that a
// claim on another replica is writing right now, so concurrent polls are not all offered the
// same deployment, and a poll never waits for a claim.
func (t *Tx) CountQueued(org string, most int) (int, error) {
	var n int
	err := t.tx.QueryRow(t.ctx, `SELECT count(*) FROM (SELECT 1 FROM deployments WHERE org = $1 AND status = 'queued' LIMIT $2) q`,
		org, most).Scan(&n)
	return n, err
}

// CountRunnerQueue implements store.Tx.
func (t *Tx) CountRunnerQueue(org, runner string, most int) (int, error) {
	var n int
	err := t.tx.QueryRow(t.ctx, `SELECT count(*) FROM (SELECT 1 FROM deployments WHERE org = $1 AND runner_id = $2 AND status = 'queued' LIMIT $3) q`,
		org, runner, most).Scan(&n)
	return n, err
}

// Queued implements store.Tx.
func (t *Tx) Queued(org, runner string, limit int) ([]string, error) {
	if limit <= 0 {
		return nil, nil
	}
	return t.ids(`SELECT id FROM deployments WHERE org = $1 AND runner_id = $2 AND status = 'queued'
		ORDER BY seq LIMIT $3 FOR UPDATE SKIP LOCKED`, org, runner, limit)
}

// Leased implements store.Tx.
func (t *Tx) Leased(org, runner string) ([]string, error) {
	return t.ids(`SELECT id FROM deployments WHERE org = $1 AND runner_id = $2 AND lease_expires_ns IS NOT NULL
		ORDER BY id COLLATE "C"`, org, runner)
}

// ExpiredLeases implements store.Tx.
func (t *Tx) ExpiredLeases(now time.Time) ([]store.LeaseRef, error) {
	rows, err := t.tx.Query(t.ctx, `SELECT org, runner_id, id FROM deployments
		WHERE lease_expires_ns IS NOT NULL AND lease_expires_ns <= $1`, now.UnixNano())
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (store.LeaseRef, error) {
		var l store.LeaseRef
		err := r.Scan(&l.Org, &l.Runner, &l.Deployment)
		return l, err
	})
}

// StatusCounts implements store.Tx.
func (t *Tx) StatusCounts() (map[api.Status]int64, error) {
	rows, err := t.tx.Query(t.ctx, "SELECT status, count(*) FROM deployments GROUP BY status")
	if err != nil {
		return nil, err
	}
	out := map[api.Status]int64{}
	var status string
	var n int64
	_, err = pgx.ForEachRow(rows, []any{&status, &n}, func() error {
		out[api.Status(status)] = n
		return nil
	})
	return out, err
}

// QueueDepths implements store.Tx.
func (t *Tx) QueueDepths() ([]store.QueueDepth, error) {
	rows, err := t.tx.Query(t.ctx, `SELECT org, runner_id, count(*) FROM deployments WHERE status = 'queued'
		GROUP BY org, runner_id ORDER BY org, runner_id`)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (store.QueueDepth, error) {
		var d store.QueueDepth
		err := r.Scan(&d.Org, &d.Runner, &d.Queued)
		return d, err
	})
}

// HasEvent implements store.Tx.
func (t *Tx) HasEvent(org, deployment string, attempt int, seq int64) (bool, error) {
	var one int
	return t.One("SELECT 1 FROM events WHERE org = $1 AND deployment_id = $2 AND attempt = $3 AND seq = $4",
		[]any{org, deployment, attempt, seq}, &one)
}

// PutEvent implements store.Tx.
func (t *Tx) PutEvent(org, deployment string, attempt int, seq int64, ev api.Event) error {
	data, err := json.Marshal(ev)
	if err != nil {
		return err
	}
	return t.Exec("INSERT INTO events (org, deployment_id, attempt, seq, doc) VALUES ($1, $2, $3, $4, $5)", org, deployment, attempt, seq, data)
}

// CountEvents implements store.Tx.
func (t *Tx) CountEvents(org, deployment string, attempt, most int) (int, error) {
	var n int
	_, err := t.One(`SELECT count(*) FROM (SELECT 1 FROM events WHERE org = $1 AND deployment_id = $2 AND attempt = $3 LIMIT $4) e`,
		[]any{org, deployment, attempt, most}, &n)
	return n, err
}

// ListEvents implements store.Tx.
func (t *Tx) ListEvents(org, deployment string) ([]api.Event, error) {
	rows, err := t.tx.Query(t.ctx, "SELECT doc FROM events WHERE org = $1 AND deployment_id = $2 ORDER BY attempt, seq", org, deployment)
	if err != nil {
		return nil, err
	}
	docs, err := pgx.CollectRows(rows, pgx.RowTo[[]byte])
	if err != nil {
		return nil, err
	}
	out := make([]api.Event, len(docs))
	for i, d := range docs {
		if err := store.Unmarshal(d, &out[i]); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// deleteUpTo deletes up to budget rows of a deployment from table; finished when none is left.
func (t *Tx) deleteUpTo(table, org, deployment string, budget int) (int, bool, error) {
	budget = max(budget, 0)
	tag, err := t.tx.Exec(t.ctx, `DELETE FROM `+table+` WHERE ctid IN (SELECT ctid FROM `+table+`
		WHERE org = $1 AND deployment_id = $2 LIMIT $3)`, org, deployment, budget)
	if err != nil {
		return 0, false, err
	}
	n := int(tag.RowsAffected())
	if n < budget {
		return n, true, nil
	}
	var one int
	left, err := t.One("SELECT 1 FROM "+table+" WHERE org = $1 AND deployment_id = $2 LIMIT 1", []any{org, deployment}, &one)
	return n, !left, err
}

// DeleteEvents implements store.Tx.
func (t *Tx) DeleteEvents(org, deployment string, budget int) (int, bool, error) {
	return t.deleteUpTo("events", org, deployment, budget)
}

// PutLogChunk implements store.Tx.
func (t *Tx) PutLogChunk(org, deployment string, start int64, b []byte) error {
	return t.Exec("INSERT INTO logs (org, deployment_id, start, data) VALUES ($1, $2, $3, $4)", org, deployment, start, b)
}

// LastLogByte implements store.Tx.
func (t *Tx) LastLogByte(org, deployment string) (byte, error) {
	var last []byte
	_, err := t.One(`SELECT substring(data from length(data) for 1) FROM logs WHERE org = $1 AND deployment_id = $2 AND length(data) > 0
		ORDER BY start DESC LIMIT 1`, []any{org, deployment}, &last)
	if len(last) == 0 {
		return 0, err
	}
	return last[0], err
}

// ReadLog implements store.Tx.
func (t *Tx) ReadLog(org, deployment string, offset, limit int64) ([]byte, error) {
	rows, err := t.tx.Query(t.ctx, `SELECT start, data FROM logs WHERE org = $1 AND deployment_id = $2
		AND start >= coalesce((SELECT max(start) FROM logs WHERE org = $1 AND deployment_id = $2 AND start <= $3), 0)
		ORDER BY start`, org, deployment, offset)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := []byte{}
	for rows.Next() && int64(len(out)) < limit {
		var start int64
		var v []byte
		if err := rows.Scan(&start, &v); err != nil {
			return nil, err
		}
		if start+int64(len(v)) <= offset {
			continue
		}
		from := max(offset-start, 0)
		take := min(int64(len(v))-from, limit-int64(len(out)))
		out = append(out, v[from:from+take]...)
	}
	return out, rows.Err()
}

// DeleteLogs implements store.Tx.
func (t *Tx) DeleteLogs(org, deployment string, budget int) (int, bool, error) {
	return t.deleteUpTo("logs", org, deployment, budget)
}

// NextDue finds the oldest ended deployment whose part is still there. The deployments stage
// needs no mark of its own: a purged deployment's row is gone.
func (t *Tx) NextDue(stage store.PurgeStageKind, cutoff time.Time) (store.DueEntry, bool, error) {
	cond := map[store.PurgeStageKind]string{store.PurgeDeployments: "true", store.PurgeLogsStage: "NOT logs_purged", store.PurgeSources: "NOT source_purged"}[stage]
	var e store.DueEntry
	ok, err := t.One(`SELECT org, id FROM deployments WHERE finished_ns IS NOT NULL AND finished_ns <= $1 AND `+cond+`
		ORDER BY finished_ns, org, id LIMIT 1`, []any{cutoff.UnixNano()}, &e.Org, &e.ID)
	return e, ok, err
}

// DropDue has nothing to do: the purge itself set the column nextDue looks at.
func (t *Tx) DropDue(store.PurgeStageKind, store.DueEntry) error { return nil }
