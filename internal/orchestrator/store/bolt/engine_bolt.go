// Package bolt is the orchestrator's default storage engine: every record in one bbolt file in
// the data directory, for one orchestrator on one machine. It implements store.Engine and
// store.Tx; the rules in package store run on it unchanged.
package bolt

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/outpost-dev/terraform-provider-outpost/internal/orchestrator/store"
	bolt "go.etcd.io/bbolt"
	berrors "go.etcd.io/bbolt/errors"
)

// DBFile is the name of the database file inside the data directory.
const DBFile = "orchestrator.db"

// Bucket names. Keys are "org/id" (ids are DNS-1123 labels, so '/' never occurs inside one);
// ordered indexes append big-endian numbers so that bbolt's byte order is the wanted order.
var (
	BucketMeta        = []byte("meta")           // "schema" → version ("secret" of older versions: LegacySecret)
	BucketOrgs        = []byte("orgs")           // org → orgRecord
	BucketRunners     = []byte("runners")        // org/runner → api.Runner (status fields persisted, Connected computed)
	BucketStorages    = []byte("storages")       // org/storage → api.StateStorage
	BucketDeployments = []byte("deployments")    // org/deployment → store.DeploymentRecord (without source)
	BucketSources     = []byte("sources")        // org/deployment → api.Source (kept apart: it can be 16 MiB and records change often)
	bDeploymentSeq    = []byte("deployment_seq") // org/ + seq → deployment id (list order)
	bQueue            = []byte("queue")          // org/runner/ + seq → deployment id (queued deployments, oldest first)
	bLeased           = []byte("leased")         // org/runner/deployment → "" (deployments holding a job lease)
	BucketEvents      = []byte("events")         // org/deployment/ + attempt + seq → api.Event
	BucketLogs        = []byte("logs")           // org/deployment/ + stored offset → bytes of one append
	BucketOutputs     = []byte("outputs")        // org/deployment → api.Outputs
	BucketStates      = []byte("states")         // org/storage/state key → api.State
	// BucketStateOperations: org/operation id → api.StateOperation; BucketStateOperationQueues:
	// org/storage id → the ids of its operations that have not ended.
	BucketStateOperations      = []byte("state_operations")
	BucketStateOperationQueues = []byte("state_operation_queues")
	BucketSchedules            = []byte("schedules")        // org/schedule → api.Schedule
	BucketDrifts               = []byte("drifts")           // org/storage/state key → api.Drift (drifted ones only)
	BucketPlans                = []byte("plans")            // org/deployment → api.SavedPlan
	BucketReplay               = []byte("replay")           // token id → expiry (unix nanos)
	bReplayEx                  = []byte("replay_ex")        // expiry + token id → "" (purge order)
	bStats                     = []byte("stats")            // status → number of deployments in it
	BucketOrgTokens            = []byte("org_tokens")       // org/token id → store.OrgTokenRecord
	BucketSessions             = []byte("console_sessions") // "/" + session hash → store.SessionRecord
	bOrgTokenHashes            = []byte("org_token_hashes") // SHA-256 of a token → org/token id

	allBuckets = [][]byte{BucketMeta, BucketOrgs, BucketRunners, BucketStorages, BucketDeployments, BucketSources, bDeploymentSeq, bQueue, bLeased,
		BucketEvents, BucketLogs, BucketOutputs, BucketReplay, bReplayEx, bStats, BucketOrgTokens, bOrgTokenHashes, BucketSessions, BucketStates, BucketSchedules, BucketDrifts, BucketPlans,
		BucketStateOperations, BucketStateOperationQueues, bPurgeSources, bPurgeLogs, bPurgeDeployments}
)

// schemaVersion is the layout of the database. Version 1 (a development layout before the
// product's first release, with "jobs" buckets) is refused rather than migrated.
const schemaVersion = 2

// Engine keeps the orchestrator's records in one bbolt file. bbolt runs one write
// transaction at a time, which is what makes every rule atomic on one machine.
type Engine struct {
	DB *bolt.DB
}

// Open opens (or creates) the database in dir. Errors say which directory is at fault,
// because the common failures are a directory that is not writable and a second orchestrator
// holding the file lock.
func Open(dir string) (*Engine, error) {
	if dir == "" {
		return nil, errors.New("data directory is not set")
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("data directory %s cannot be created: %w", dir, err)
	}
	probe, err := os.CreateTemp(dir, ".write-test-*")
	if err != nil {
		return nil, fmt.Errorf("data directory %s is not writable: %w", dir, err)
	}
	_ = probe.Close()
	_ = os.Remove(probe.Name())
	path := filepath.Join(dir, DBFile)
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: 2 * time.Second})
	if err != nil {
		if errors.Is(err, berrors.ErrTimeout) {
			return nil, fmt.Errorf("database %s is locked: another orchestrator is using data directory %s; stop it or choose another --data-dir", path, dir)
		}
		return nil, fmt.Errorf("open database %s: %w", path, err)
	}
	// A batch (every agent request's replay check) waits this long for others to join its
	// commit: long enough to gather what arrives while a commit's fsyncs run, short next to a
	// pickup (bbolt's default is 10 ms).
	db.MaxBatchDelay = 2 * time.Millisecond
	s := &Engine{DB: db}
	err = db.Update(func(tx *bolt.Tx) error {
		for _, name := range allBuckets {
			if _, err := tx.CreateBucketIfNotExists(name); err != nil {
				return fmt.Errorf("create bucket %s: %w", name, err)
			}
		}
		meta := tx.Bucket(BucketMeta)
		if v := meta.Get([]byte("schema")); v != nil {
			switch n := int(binary.BigEndian.Uint64(v)); {
			case n > schemaVersion:
				return fmt.Errorf("database %s was written by a newer orchestrator (schema %d, this one knows %d)", path, n, schemaVersion)
			case n < schemaVersion:
				return fmt.Errorf("database %s was written by a development version of the orchestrator (schema %d) that this one does not read; start with an empty --data-dir", path, n)
			}
		}
		if err := meta.Put([]byte("schema"), u64(schemaVersion)); err != nil {
			return err
		}
		if err := backfillEndedIndex(tx); err != nil {
			return fmt.Errorf("index ended deployments for retention: %w", err)
		}
		return nil // the signing secret is kept apart from the database (store.OpenSigningSecret)
	})
	if err != nil {
		_ = db.Close()
		return nil, err
	}
	return s, nil
}

// Close implements store.Engine.
func (s *Engine) Close() error { return s.DB.Close() }

// Secret is nil: a bbolt database keeps no signing secret (openSigningSecret reads its file).
func (s *Engine) Secret() []byte { return nil }

// Wake has nothing to tell: one bbolt file has one orchestrator.
func (s *Engine) Wake(context.Context, string) {}

// Update implements store.Engine.
func (s *Engine) Update(_ context.Context, fn func(tx store.Tx) error) error {
	return s.DB.Update(func(tx *bolt.Tx) error { return fn(Tx{tx}) })
}

// Batch runs concurrent calls in one bbolt transaction (db.Batch), so thousands of polling
// agents share commits and their fsyncs instead of queueing one commit each.
func (s *Engine) Batch(_ context.Context, fn func(tx store.Tx) error) error {
	return s.DB.Batch(func(tx *bolt.Tx) error { return fn(Tx{tx}) })
}

// View implements store.Engine.
func (s *Engine) View(_ context.Context, fn func(tx store.Tx) error) error {
	return s.DB.View(func(tx *bolt.Tx) error { return fn(Tx{tx}) })
}

// Tx is a bbolt transaction as a store.Tx.
type Tx struct{ tx *bolt.Tx }

// Writable implements store.Tx.
func (t Tx) Writable() bool { return t.tx.Writable() }

func key(parts ...string) []byte {
	n := 0
	for _, p := range parts {
		n += len(p) + 1
	}
	b := make([]byte, 0, n)
	for i, p := range parts {
		if i > 0 {
			b = append(b, '/')
		}
		b = append(b, p...)
	}
	return b
}

// prefix is key(parts...) followed by '/', for scanning the children of a record.
func prefix(parts ...string) []byte { return append(key(parts...), '/') }

func u64(v uint64) []byte {
	b := make([]byte, 8)
	binary.BigEndian.PutUint64(b, v)
	return b
}

func getJSON(b *bolt.Bucket, k []byte, v any) (bool, error) {
	data := b.Get(k)
	if data == nil {
		return false, nil
	}
	if err := json.Unmarshal(data, v); err != nil {
		return true, fmt.Errorf("decode record %s: %w", k, err)
	}
	return true, nil
}

func putJSON(b *bolt.Bucket, k []byte, v any) error {
	data, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("encode %s: %w", k, err)
	}
	return b.Put(k, data)
}

// EnsureOrg implements store.Tx.
func (t Tx) EnsureOrg(org string, now time.Time) error {
	b := t.tx.Bucket(BucketOrgs)
	if b.Get([]byte(org)) != nil {
		return nil
	}
	return putJSON(b, []byte(org), store.OrgRecord{CreatedAt: now})
}

// HasOrg implements store.Tx.
func (t Tx) HasOrg(org string) (bool, error) {
	return t.tx.Bucket(BucketOrgs).Get([]byte(org)) != nil, nil
}

var docBuckets = map[store.DocKind][]byte{
	store.KindRunner: BucketRunners, store.KindStorage: BucketStorages, store.KindOrgToken: BucketOrgTokens, store.KindSource: BucketSources, store.KindOutputs: BucketOutputs,
	store.KindSession: BucketSessions, store.KindState: BucketStates, store.KindSchedule: BucketSchedules, store.KindDrift: BucketDrifts,
	store.KindPlan:           BucketPlans,
	store.KindStateOperation: BucketStateOperations, store.KindStateOperationQueue: BucketStateOperationQueues,
}

// GetDoc implements store.Tx.
func (t Tx) GetDoc(k store.DocKind, org, id string, v any) (bool, error) {
	return getJSON(t.tx.Bucket(docBuckets[k]), key(org, id), v)
}

// HasDoc implements store.Tx.
func (t Tx) HasDoc(k store.DocKind, org, id string) (bool, error) {
	return t.tx.Bucket(docBuckets[k]).Get(key(org, id)) != nil, nil
}

// PutDoc implements store.Tx.
func (t Tx) PutDoc(k store.DocKind, org, id string, v any) error {
	return putJSON(t.tx.Bucket(docBuckets[k]), key(org, id), v)
}

// DeleteDoc implements store.Tx.
func (t Tx) DeleteDoc(k store.DocKind, org, id string) error {
	return t.tx.Bucket(docBuckets[k]).Delete(key(org, id))
}

// ListDocs implements store.Tx.
func (t Tx) ListDocs(k store.DocKind, org string, each func(data []byte) (bool, error)) error {
	return scanPrefix(t.tx.Bucket(docBuckets[k]), prefix(org), func(_, v []byte) (bool, error) { return each(v) })
}

// ListAllDocs implements store.Tx.
func (t Tx) ListAllDocs(k store.DocKind, each func(org string, data []byte) (bool, error)) error {
	c := t.tx.Bucket(docBuckets[k]).Cursor()
	for k, v := c.First(); k != nil; k, v = c.Next() {
		org, _, _ := bytes.Cut(k, []byte("/"))
		if more, err := each(string(org), v); err != nil || !more {
			return err
		}
	}
	return nil
}

// PutOrgToken implements store.Tx.
func (t Tx) PutOrgToken(rec *store.OrgTokenRecord) error {
	if err := t.tx.Bucket(bOrgTokenHashes).Put(rec.Hash, key(rec.Org, rec.ID)); err != nil {
		return err
	}
	return t.PutDoc(store.KindOrgToken, rec.Org, rec.ID, rec)
}

// DeleteOrgToken implements store.Tx.
func (t Tx) DeleteOrgToken(rec *store.OrgTokenRecord) error {
	if err := t.tx.Bucket(bOrgTokenHashes).Delete(rec.Hash); err != nil {
		return err
	}
	return t.DeleteDoc(store.KindOrgToken, rec.Org, rec.ID)
}

// OrgTokenByHash implements store.Tx.
func (t Tx) OrgTokenByHash(h []byte) (*store.OrgTokenRecord, error) {
	ref := t.tx.Bucket(bOrgTokenHashes).Get(h)
	if ref == nil {
		return nil, nil
	}
	var rec store.OrgTokenRecord
	ok, err := getJSON(t.tx.Bucket(BucketOrgTokens), ref, &rec)
	if err != nil || !ok {
		return nil, err
	}
	return &rec, nil
}

// scanPrefix calls fn for every key under p in ascending order; fn returns false to stop.
func scanPrefix(b *bolt.Bucket, p []byte, fn func(k, v []byte) (bool, error)) error {
	c := b.Cursor()
	for k, v := c.Seek(p); k != nil && bytes.HasPrefix(k, p); k, v = c.Next() {
		more, err := fn(k, v)
		if err != nil || !more {
			return err
		}
	}
	return nil
}

// scanPrefixReverse is scanPrefix in descending order.
func scanPrefixReverse(b *bolt.Bucket, p []byte, fn func(k, v []byte) (bool, error)) error {
	c := b.Cursor()
	end := append(bytes.Clone(p), bytes.Repeat([]byte{0xff}, 16)...)
	var k, v []byte
	if k, _ = c.Seek(end); k == nil {
		k, v = c.Last()
	} else {
		k, v = c.Prev()
	}
	for ; k != nil && bytes.HasPrefix(k, p); k, v = c.Prev() {
		more, err := fn(k, v)
		if err != nil || !more {
			return err
		}
	}
	return nil
}

// CheckReplay checks and stores in one write transaction, so two requests carrying the same id
// cannot both pass.
// checkReplay runs as a batch: every agent request comes here, so the requests of the same few
// milliseconds share one commit (checked one after the other inside it) instead of queueing a
// commit, and its fsyncs, each. A batch may run fn again, so it starts from scratch.
func (s *Engine) CheckReplay(_ context.Context, id string, now, until time.Time) (bool, error) {
	seen := false
	err := s.DB.Batch(func(tx *bolt.Tx) error {
		var err error
		seen, err = Tx{tx}.CheckReplay(id, now, until)
		return err
	})
	return seen, err
}

// CheckReplay implements store.Tx.
func (t Tx) CheckReplay(id string, now, until time.Time) (bool, error) {
	b := t.tx.Bucket(BucketReplay)
	if v := b.Get([]byte(id)); len(v) == 8 {
		if exp := time.Unix(0, int64(binary.BigEndian.Uint64(v))); !now.After(exp) {
			return true, nil
		}
	}
	exp := u64(uint64(until.UnixNano()))
	if err := b.Put([]byte(id), exp); err != nil {
		return false, err
	}
	return false, t.tx.Bucket(bReplayEx).Put(append(exp, id...), nil)
}

// PurgeReplay implements store.Engine.
func (s *Engine) PurgeReplay(_ context.Context, now time.Time) (int, error) {
	limit := u64(uint64(now.UnixNano()))
	due := false
	if err := s.DB.View(func(tx *bolt.Tx) error {
		k, _ := tx.Bucket(bReplayEx).Cursor().First()
		due = len(k) > 8 && bytes.Compare(k[:8], limit) < 0
		return nil
	}); err != nil || !due {
		return 0, err
	}
	n := 0
	err := s.DB.Update(func(tx *bolt.Tx) error {
		n = 0
		ids, byExp := tx.Bucket(BucketReplay), tx.Bucket(bReplayEx)
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

// legacySecretKey is where orchestrators before the separate signing secret file kept the
// secret: in the database's meta bucket, so whoever had a copy of the database could mint job
// tokens.
var LegacySecretKey = []byte("secret")

// LegacySecret implements legacySecrets: the secret an older orchestrator kept in meta.
func (s *Engine) LegacySecret() ([]byte, error) {
	var secret []byte
	err := s.DB.View(func(tx *bolt.Tx) error {
		secret = bytes.Clone(tx.Bucket(BucketMeta).Get(LegacySecretKey))
		return nil
	})
	return secret, err
}

// DropLegacySecret implements legacySecrets.
func (s *Engine) DropLegacySecret() error {
	return s.DB.Update(func(tx *bolt.Tx) error { return tx.Bucket(BucketMeta).Delete(LegacySecretKey) })
}
