package orchestrator

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

	bolt "go.etcd.io/bbolt"
	berrors "go.etcd.io/bbolt/errors"
)

// DBFile is the name of the database file inside the data directory.
const DBFile = "orchestrator.db"

// Bucket names. Keys are "org/id" (ids are DNS-1123 labels, so '/' never occurs inside one);
// ordered indexes append big-endian numbers so that bbolt's byte order is the wanted order.
var (
	bMeta           = []byte("meta")             // "schema" → version ("secret" of older versions: signing_secret.go)
	bOrgs           = []byte("orgs")             // org → orgRecord
	bRunners        = []byte("runners")          // org/runner → api.Runner (status fields persisted, Connected computed)
	bStorages       = []byte("storages")         // org/storage → api.StateStorage
	bDeployments    = []byte("deployments")      // org/deployment → deploymentRecord (without source)
	bSources        = []byte("sources")          // org/deployment → api.Source (kept apart: it can be 16 MiB and records change often)
	bDeploymentSeq  = []byte("deployment_seq")   // org/ + seq → deployment id (list order)
	bQueue          = []byte("queue")            // org/runner/ + seq → deployment id (queued deployments, oldest first)
	bLeased         = []byte("leased")           // org/runner/deployment → "" (deployments holding a job lease)
	bEvents         = []byte("events")           // org/deployment/ + attempt + seq → api.Event
	bLogs           = []byte("logs")             // org/deployment/ + stored offset → bytes of one append
	bOutputs        = []byte("outputs")          // org/deployment → api.Outputs
	bReplay         = []byte("replay")           // token id → expiry (unix nanos)
	bReplayEx       = []byte("replay_ex")        // expiry + token id → "" (purge order)
	bStats          = []byte("stats")            // status → number of deployments in it
	bOrgTokens      = []byte("org_tokens")       // org/token id → orgTokenRecord (store_tokens.go)
	bOrgTokenHashes = []byte("org_token_hashes") // SHA-256 of a token → org/token id

	allBuckets = [][]byte{bMeta, bOrgs, bRunners, bStorages, bDeployments, bSources, bDeploymentSeq, bQueue, bLeased,
		bEvents, bLogs, bOutputs, bReplay, bReplayEx, bStats, bOrgTokens, bOrgTokenHashes,
		bPurgeSources, bPurgeLogs, bPurgeDeployments}
)

// schemaVersion is the layout of the database. Version 1 (a development layout before the
// product's first release, with "jobs" buckets) is refused rather than migrated.
const schemaVersion = 2

// boltEngine keeps the orchestrator's records in one bbolt file. bbolt runs one write
// transaction at a time, which is what makes every rule atomic on one machine.
type boltEngine struct {
	db *bolt.DB
}

// openBolt opens (or creates) the database in dir. Errors say which directory is at fault,
// because the common failures are a directory that is not writable and a second orchestrator
// holding the file lock.
func openBolt(dir string) (*boltEngine, error) {
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
	s := &boltEngine{db: db}
	err = db.Update(func(tx *bolt.Tx) error {
		for _, name := range allBuckets {
			if _, err := tx.CreateBucketIfNotExists(name); err != nil {
				return fmt.Errorf("create bucket %s: %w", name, err)
			}
		}
		meta := tx.Bucket(bMeta)
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
		return nil // the signing secret is kept apart from the database (signing_secret.go)
	})
	if err != nil {
		_ = db.Close()
		return nil, err
	}
	return s, nil
}

func (s *boltEngine) close() error { return s.db.Close() }

// secret is nil: a bbolt database keeps no signing secret (openSigningSecret reads its file).
func (s *boltEngine) secret() []byte { return nil }

// wake has nothing to tell: one bbolt file has one orchestrator.
func (s *boltEngine) wake(context.Context, string) {}

func (s *boltEngine) update(_ context.Context, fn func(tx storeTx) error) error {
	return s.db.Update(func(tx *bolt.Tx) error { return fn(boltTx{tx}) })
}

// batch runs concurrent calls in one bbolt transaction (db.Batch), so thousands of polling
// agents share commits and their fsyncs instead of queueing one commit each.
func (s *boltEngine) batch(_ context.Context, fn func(tx storeTx) error) error {
	return s.db.Batch(func(tx *bolt.Tx) error { return fn(boltTx{tx}) })
}

func (s *boltEngine) view(_ context.Context, fn func(tx storeTx) error) error {
	return s.db.View(func(tx *bolt.Tx) error { return fn(boltTx{tx}) })
}

// boltTx is a bbolt transaction as a storeTx.
type boltTx struct{ tx *bolt.Tx }

func (t boltTx) writable() bool { return t.tx.Writable() }

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

func (t boltTx) ensureOrg(org string, now time.Time) error {
	b := t.tx.Bucket(bOrgs)
	if b.Get([]byte(org)) != nil {
		return nil
	}
	return putJSON(b, []byte(org), orgRecord{CreatedAt: now})
}

func (t boltTx) hasOrg(org string) (bool, error) {
	return t.tx.Bucket(bOrgs).Get([]byte(org)) != nil, nil
}

var docBuckets = map[docKind][]byte{
	kindRunner: bRunners, kindStorage: bStorages, kindOrgToken: bOrgTokens, kindSource: bSources, kindOutputs: bOutputs,
}

func (t boltTx) getDoc(k docKind, org, id string, v any) (bool, error) {
	return getJSON(t.tx.Bucket(docBuckets[k]), key(org, id), v)
}

func (t boltTx) hasDoc(k docKind, org, id string) (bool, error) {
	return t.tx.Bucket(docBuckets[k]).Get(key(org, id)) != nil, nil
}

func (t boltTx) putDoc(k docKind, org, id string, v any) error {
	return putJSON(t.tx.Bucket(docBuckets[k]), key(org, id), v)
}

func (t boltTx) deleteDoc(k docKind, org, id string) error {
	return t.tx.Bucket(docBuckets[k]).Delete(key(org, id))
}

func (t boltTx) listDocs(k docKind, org string, each func(data []byte) (bool, error)) error {
	return scanPrefix(t.tx.Bucket(docBuckets[k]), prefix(org), func(_, v []byte) (bool, error) { return each(v) })
}

func (t boltTx) putOrgToken(rec *orgTokenRecord) error {
	if err := t.tx.Bucket(bOrgTokenHashes).Put(rec.Hash, key(rec.Org, rec.ID)); err != nil {
		return err
	}
	return t.putDoc(kindOrgToken, rec.Org, rec.ID, rec)
}

func (t boltTx) deleteOrgToken(rec *orgTokenRecord) error {
	if err := t.tx.Bucket(bOrgTokenHashes).Delete(rec.Hash); err != nil {
		return err
	}
	return t.deleteDoc(kindOrgToken, rec.Org, rec.ID)
}

func (t boltTx) orgTokenByHash(h []byte) (*orgTokenRecord, error) {
	ref := t.tx.Bucket(bOrgTokenHashes).Get(h)
	if ref == nil {
		return nil, nil
	}
	var rec orgTokenRecord
	ok, err := getJSON(t.tx.Bucket(bOrgTokens), ref, &rec)
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

// checkReplay checks and stores in one write transaction, so two requests carrying the same id
// cannot both pass.
// checkReplay runs as a batch: every agent request comes here, so the requests of the same few
// milliseconds share one commit (checked one after the other inside it) instead of queueing a
// commit, and its fsyncs, each. A batch may run fn again, so it starts from scratch.
func (s *boltEngine) checkReplay(_ context.Context, id string, now, until time.Time) (bool, error) {
	seen := false
	err := s.db.Batch(func(tx *bolt.Tx) error {
		seen = false
		b := tx.Bucket(bReplay)
		if v := b.Get([]byte(id)); len(v) == 8 {
			if exp := time.Unix(0, int64(binary.BigEndian.Uint64(v))); !now.After(exp) {
				seen = true
				return nil
			}
		}
		exp := u64(uint64(until.UnixNano()))
		if err := b.Put([]byte(id), exp); err != nil {
			return err
		}
		return tx.Bucket(bReplayEx).Put(append(exp, id...), nil)
	})
	return seen, err
}

func (s *boltEngine) purgeReplay(_ context.Context, now time.Time) (int, error) {
	limit := u64(uint64(now.UnixNano()))
	due := false
	if err := s.db.View(func(tx *bolt.Tx) error {
		k, _ := tx.Bucket(bReplayEx).Cursor().First()
		due = len(k) > 8 && bytes.Compare(k[:8], limit) < 0
		return nil
	}); err != nil || !due {
		return 0, err
	}
	n := 0
	err := s.db.Update(func(tx *bolt.Tx) error {
		n = 0
		ids, byExp := tx.Bucket(bReplay), tx.Bucket(bReplayEx)
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
var legacySecretKey = []byte("secret")

// legacySecret implements legacySecrets: the secret an older orchestrator kept in meta.
func (s *boltEngine) legacySecret() ([]byte, error) {
	var secret []byte
	err := s.db.View(func(tx *bolt.Tx) error {
		secret = bytes.Clone(tx.Bucket(bMeta).Get(legacySecretKey))
		return nil
	})
	return secret, err
}

// dropLegacySecret implements legacySecrets.
func (s *boltEngine) dropLegacySecret() error {
	return s.db.Update(func(tx *bolt.Tx) error { return tx.Bucket(bMeta).Delete(legacySecretKey) })
}
