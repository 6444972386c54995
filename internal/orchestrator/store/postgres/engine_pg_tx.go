package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/outpost-dev/terraform-provider-outpost/internal/orchestrator/store"
)

// Tx is a PostgreSQL transaction as a store.Tx. Table names come from the fixed maps below,
// never from input.
type Tx struct {
	ctx   context.Context
	tx    pgx.Tx
	write bool
}

var docTables = map[store.DocKind]string{
	store.KindRunner: "runners", store.KindStorage: "state_storages", store.KindOrgToken: "org_tokens", store.KindSource: "sources", store.KindOutputs: "outputs",
	store.KindSession:  "console_sessions",
	store.KindState:    "states",
	store.KindSchedule: "schedules", store.KindDrift: "drifts",
	store.KindPlan:           "plans",
	store.KindStateOperation: "state_operations", store.KindStateOperationQueue: "state_operation_queues",
}

// Writable implements store.Tx.
func (t *Tx) Writable() bool { return t.write }

// CheckReplay implements store.Tx.
func (t *Tx) CheckReplay(id string, now, until time.Time) (bool, error) {
	var got string
	ok, err := t.One(replaySQL, []any{id, until.UnixNano(), now.UnixNano()}, &got)
	return !ok && err == nil, err
}

// Exec implements store.Tx.
func (t *Tx) Exec(sql string, args ...any) error {
	_, err := t.tx.Exec(t.ctx, sql, args...)
	return err
}

// One scans the single row of a query; ok is false when there is none.
func (t *Tx) One(sql string, args []any, dest ...any) (bool, error) {
	err := t.tx.QueryRow(t.ctx, sql, args...).Scan(dest...)
	if errors.Is(err, pgx.ErrNoRows) {
		return false, nil
	}
	return err == nil, err
}

// GetDoc implements store.Tx.
func (t *Tx) GetDoc(k store.DocKind, org, id string, v any) (bool, error) {
	var data []byte
	ok, err := t.One("SELECT doc FROM "+docTables[k]+" WHERE org = $1 AND id = $2", []any{org, id}, &data)
	if err != nil || !ok {
		return false, err
	}
	if err := json.Unmarshal(data, v); err != nil {
		return true, fmt.Errorf("decode %s %s/%s: %w", docTables[k], org, id, err)
	}
	return true, nil
}

// HasDoc implements store.Tx.
func (t *Tx) HasDoc(k store.DocKind, org, id string) (bool, error) {
	var one int
	return t.One("SELECT 1 FROM "+docTables[k]+" WHERE org = $1 AND id = $2", []any{org, id}, &one)
}

// PutDoc implements store.Tx.
func (t *Tx) PutDoc(k store.DocKind, org, id string, v any) error {
	data, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("encode %s %s/%s: %w", docTables[k], org, id, err)
	}
	return t.Exec("INSERT INTO "+docTables[k]+" (org, id, doc) VALUES ($1, $2, $3) ON CONFLICT (org, id) DO UPDATE SET doc = excluded.doc", org, id, data)
}

// DeleteDoc implements store.Tx.
func (t *Tx) DeleteDoc(k store.DocKind, org, id string) error {
	return t.Exec("DELETE FROM "+docTables[k]+" WHERE org = $1 AND id = $2", org, id)
}

// ListDocs implements store.Tx.
func (t *Tx) ListDocs(k store.DocKind, org string, each func(data []byte) (bool, error)) error {
	rows, err := t.tx.Query(t.ctx, "SELECT doc FROM "+docTables[k]+" WHERE org = $1 ORDER BY id COLLATE \"C\"", org)
	if err != nil {
		return err
	}
	var docs [][]byte
	for rows.Next() {
		var data []byte
		if err := rows.Scan(&data); err != nil {
			rows.Close()
			return err
		}
		docs = append(docs, data)
	}
	if err := rows.Err(); err != nil {
		return err
	}
	for _, d := range docs {
		if more, err := each(d); err != nil || !more {
			return err
		}
	}
	return nil
}

// ListAllDocs implements store.Tx.
func (t *Tx) ListAllDocs(k store.DocKind, each func(org string, data []byte) (bool, error)) error {
	rows, err := t.tx.Query(t.ctx, "SELECT org, doc FROM "+docTables[k]+" ORDER BY org COLLATE \"C\", id COLLATE \"C\"")
	if err != nil {
		return err
	}
	type row struct {
		org string
		doc []byte
	}
	var all []row
	for rows.Next() {
		var r row
		if err := rows.Scan(&r.org, &r.doc); err != nil {
			rows.Close()
			return err
		}
		all = append(all, r)
	}
	if err := rows.Err(); err != nil {
		return err
	}
	for _, r := range all {
		if more, err := each(r.org, r.doc); err != nil || !more {
			return err
		}
	}
	return nil
}

// EnsureOrg implements store.Tx.
func (t *Tx) EnsureOrg(org string, now time.Time) error {
	return t.Exec("INSERT INTO orgs (org, created_at) VALUES ($1, $2) ON CONFLICT DO NOTHING", org, now)
}

// HasOrg implements store.Tx.
func (t *Tx) HasOrg(org string) (bool, error) {
	var one int
	return t.One("SELECT 1 FROM orgs WHERE org = $1", []any{org}, &one)
}

// PutOrgToken implements store.Tx.
func (t *Tx) PutOrgToken(rec *store.OrgTokenRecord) error {
	data, err := json.Marshal(rec)
	if err != nil {
		return err
	}
	return t.Exec("INSERT INTO org_tokens (org, id, hash, doc) VALUES ($1, $2, $3, $4)", rec.Org, rec.ID, rec.Hash, data)
}

// DeleteOrgToken implements store.Tx.
func (t *Tx) DeleteOrgToken(rec *store.OrgTokenRecord) error {
	return t.DeleteDoc(store.KindOrgToken, rec.Org, rec.ID)
}

// OrgTokenByHash implements store.Tx.
func (t *Tx) OrgTokenByHash(h []byte) (*store.OrgTokenRecord, error) {
	var data []byte
	ok, err := t.One("SELECT doc FROM org_tokens WHERE hash = $1", []any{h}, &data)
	if err != nil || !ok {
		return nil, err
	}
	var rec store.OrgTokenRecord
	return &rec, store.Unmarshal(data, &rec)
}

// ids collects the first column of a query's rows.
func (t *Tx) ids(sql string, args ...any) ([]string, error) {
	rows, err := t.tx.Query(t.ctx, sql, args...)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowTo[string])
}
