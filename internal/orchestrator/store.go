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

// store is the orchestrator's persistent state in one bbolt file. Every method that changes
// more than one record does so in a single Update transaction, so an invariant (a deployment is
// in the queue index exactly when it is queued, a job lease exists exactly when it is in the
// leased index, the per-status counters match the deployments) holds across crashes.
type store struct {
	db *bolt.DB
	// secret signs job tokens; it is kept apart from the database (signing_secret.go).
	secret []byte
	now    func() time.Time
	// logCap is the most log bytes kept per deployment.
	logCap int64
}

type orgRecord struct {
	CreatedAt time.Time `json:"created_at"`
}

// openStore opens (or creates) the database in dir. Errors say which directory is at fault,
// because the common failures are a directory that is not writable and a second orchestrator
// holding the file lock.
func openStore(dir string, now func() time.Time, logCap int64) (*store, error) {
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
	// A batch (every agent request's replay check, every poll's renewals) waits this long for
	// others to join its commit: long enough to gather what arrives while a commit's fsyncs run,
	// short next to a pickup (bbolt's default is 10 ms).
	db.MaxBatchDelay = 2 * time.Millisecond
	s := &store{db: db, now: now, logCap: logCap}
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
		return nil
	})
	if err != nil {
		_ = db.Close()
		return nil, err
	}
	return s, nil
}

func (s *store) close() error { return s.db.Close() }

// update runs fn in a write transaction unless ctx is already done. When fn refuses the request
// (a *refusal or an api.FieldError), what it wrote before refusing is still committed: the
// store only ever writes ahead of a refusal to settle an expired lease or to record that an
// agent was seen, and both are true whatever the request asked, so the state a refusal reports
// is the state stored. Any other error rolls back.
func (s *store) update(ctx context.Context, fn func(tx *bolt.Tx) error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	var refused error
	err := s.db.Update(func(tx *bolt.Tx) error {
		err := fn(tx)
		if _, ok := asRefusal(err); ok {
			refused = err
			return nil
		}
		return err
	})
	if err != nil {
		return err
	}
	return refused
}

// batch is update for the writes every poll makes (the runner's last sighting, job lease
// renewals): bbolt runs concurrent batch calls in one transaction, so thousands of agents polling
// share commits (and their fsyncs) instead of queueing one commit each. fn may run more than once
// and must start from scratch every time.
func (s *store) batch(ctx context.Context, fn func(tx *bolt.Tx) error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	var refused error
	err := s.db.Batch(func(tx *bolt.Tx) error {
		refused = nil
		err := fn(tx)
		if _, ok := asRefusal(err); ok {
			refused = err
			return nil
		}
		return err
	})
	if err != nil {
		return err
	}
	return refused
}

// view runs fn in a read transaction unless ctx is already done.
func (s *store) view(ctx context.Context, fn func(tx *bolt.Tx) error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	return s.db.View(fn)
}

// timeNow is the store's clock without monotonic reading, in UTC, so stored and returned times
// compare equal after a JSON round trip.
func (s *store) timeNow() time.Time { return s.now().UTC().Round(0) }

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

// ensureOrg records an organisation the first time something is created in it.
func ensureOrg(tx *bolt.Tx, org string, now time.Time) error {
	b := tx.Bucket(bOrgs)
	if b.Get([]byte(org)) != nil {
		return nil
	}
	return putJSON(b, []byte(org), orgRecord{CreatedAt: now})
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

func unmarshal(data []byte, v any) error {
	if err := json.Unmarshal(data, v); err != nil {
		return fmt.Errorf("decode stored record: %w", err)
	}
	return nil
}

// createOrgObject stores a new object of an organisation under id in bucket, refusing an id that
// is taken; build makes the object at time now, and may refuse the input. what names the kind of
// object in messages.
func createOrgObject[T any](ctx context.Context, s *store, bucket []byte, org, id, what string, build func(tx *bolt.Tx, now time.Time) (T, error)) (*T, error) {
	var out T
	err := s.update(ctx, func(tx *bolt.Tx) error {
		b := tx.Bucket(bucket)
		if b.Get(key(org, id)) != nil {
			return conflict("%s %q already exists in organisation %q; update it with PUT or choose another id", what, id, org)
		}
		now := s.timeNow()
		v, err := build(tx, now)
		if err != nil {
			return err
		}
		if err := ensureOrg(tx, org, now); err != nil {
			return err
		}
		out = v
		return putJSON(b, key(org, id), v)
	})
	if err != nil {
		return nil, err
	}
	return &out, nil
}

// updateOrgObject changes a stored object of an organisation; change applies the input to it at
// time now, and may refuse it.
func updateOrgObject[T any](ctx context.Context, s *store, bucket []byte, org, id, what string, change func(tx *bolt.Tx, v *T, now time.Time) error) (*T, error) {
	var out *T
	err := s.update(ctx, func(tx *bolt.Tx) error {
		v, err := getOrgObject[T](tx, bucket, org, id, what)
		if err != nil {
			return err
		}
		if err := change(tx, v, s.timeNow()); err != nil {
			return err
		}
		out = v
		return putJSON(tx.Bucket(bucket), key(org, id), v)
	})
	return out, err
}

// getOrgObject reads one JSON object of an organisation from bucket; what names it in the
// not-found message.
func getOrgObject[T any](tx *bolt.Tx, bucket []byte, org, id, what string) (*T, error) {
	var v T
	ok, err := getJSON(tx.Bucket(bucket), key(org, id), &v)
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, notFound("%s %q does not exist in organisation %q", what, id, org)
	}
	return &v, nil
}

// viewOrgObject is getOrgObject in a read transaction of its own.
func viewOrgObject[T any](ctx context.Context, s *store, bucket []byte, org, id, what string) (*T, error) {
	return viewOne(ctx, s, func(tx *bolt.Tx) (*T, error) { return getOrgObject[T](tx, bucket, org, id, what) })
}

// listOrgObjects reads every JSON object of an organisation from bucket, in key order.
func listOrgObjects[T any](ctx context.Context, s *store, bucket []byte, org string) ([]T, error) {
	out := []T{}
	err := s.view(ctx, func(tx *bolt.Tx) error {
		return scanPrefix(tx.Bucket(bucket), prefix(org), func(_, data []byte) (bool, error) {
			var v T
			if err := unmarshal(data, &v); err != nil {
				return false, err
			}
			out = append(out, v)
			return true, nil
		})
	})
	return out, err
}

// viewOne runs a read-only transaction that produces one value.
func viewOne[T any](ctx context.Context, s *store, fn func(tx *bolt.Tx) (*T, error)) (*T, error) {
	var out *T
	err := s.view(ctx, func(tx *bolt.Tx) error {
		v, err := fn(tx)
		out = v
		return err
	})
	return out, err
}
