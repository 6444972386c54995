package engines

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"path/filepath"
	"time"

	"github.com/outpost-dev/terraform-provider-outpost/internal/orchestrator/store"
	"github.com/outpost-dev/terraform-provider-outpost/internal/orchestrator/store/bolt"
	"github.com/outpost-dev/terraform-provider-outpost/internal/orchestrator/store/postgres"
	"go.etcd.io/bbolt"
)

// CopyCounts is what CopyStore copied.
type CopyCounts struct {
	Orgs, Runners, StateStorages, OrgTokens, Deployments, Sources, Outputs, Events, LogChunks, ReplayIDs, States, Schedules, Drifts, Plans, StateOperations, StateOperationQueues int
}

// CopyStore copies the bbolt database of a data directory into an empty PostgreSQL database, in
// one transaction, so a failed copy leaves the target empty. Everything is copied, the server
// secret included, so job tokens already handed out stay valid, and so do the agent token ids
// already seen (a captured token cannot be replayed against the new store). The orchestrator
// using dir must be stopped first: bbolt's file lock refuses the copy otherwise. insecureTLS
// lets databaseURL reach a server off loopback without verified TLS (CheckDatabaseTLS).
// progress gets a line per kind of record.
func CopyStore(ctx context.Context, dir, databaseURL string, insecureTLS bool, progress io.Writer) (*CopyCounts, error) {
	if _, err := postgres.ParsePGConfig(databaseURL, insecureTLS); err != nil {
		return nil, err // before the data directory is opened
	}
	src, err := bolt.Open(dir)
	if err != nil {
		return nil, err
	}
	defer src.Close()
	// The secret that signs the job tokens already handed out: the data directory's file, or,
	// from an orchestrator before the file, the database's meta bucket.
	secret, err := store.ReadSigningSecret(filepath.Join(dir, store.SigningSecretFile), slog.New(slog.DiscardHandler))
	if errors.Is(err, fs.ErrNotExist) {
		secret, err = src.LegacySecret()
	}
	if err != nil {
		return nil, fmt.Errorf("read the signing secret of %s: %w", dir, err)
	}
	if len(secret) == 0 {
		return nil, fmt.Errorf("data directory %s has no signing secret (%s); copy it from where --signing-secret-file pointed into that file first", dir, store.SigningSecretFile)
	}
	dst, err := postgres.Open(ctx, databaseURL, insecureTLS, slog.New(slog.DiscardHandler))
	if err != nil {
		return nil, err
	}
	defer dst.Close()
	var n CopyCounts
	err = src.DB.View(func(btx *bbolt.Tx) error {
		return dst.Update(ctx, func(t store.Tx) error {
			tx, ok := t.(*postgres.Tx)
			if !ok {
				return errors.New("internal error: not a PostgreSQL transaction")
			}
			n = CopyCounts{}
			if err := requireEmpty(tx); err != nil {
				return err
			}
			return copyAll(btx, tx, secret, &n, progress)
		})
	})
	if err != nil {
		return nil, err
	}
	return &n, nil
}

func requireEmpty(tx *postgres.Tx) error {
	var n int
	if _, err := tx.One(`SELECT (SELECT count(*) FROM orgs) + (SELECT count(*) FROM runners) + (SELECT count(*) FROM deployments)`, nil, &n); err != nil {
		return err
	}
	if n > 0 {
		return fmt.Errorf("the PostgreSQL database already holds %d organisations, runners and deployments; copy into an empty database (a new one, or drop its tables)", n)
	}
	return nil
}

// copyAll copies every bucket's records through the PostgreSQL engine's own writes, so the
// derived columns come out as the engine writes them.
func copyAll(b *bbolt.Tx, tx *postgres.Tx, secret []byte, n *CopyCounts, progress io.Writer) error {
	step := func(what string, count *int, bucket []byte, each func(k, v []byte) error) error {
		start := time.Now()
		err := b.Bucket(bucket).ForEach(func(k, v []byte) error {
			*count++
			return each(k, v)
		})
		if err != nil {
			return fmt.Errorf("copy %s: %w", what, err)
		}
		fmt.Fprintf(progress, "copied %d %s in %s\n", *count, what, time.Since(start).Round(time.Millisecond))
		return nil
	}
	doc := func(kind store.DocKind) func(k, v []byte) error {
		return func(k, v []byte) error {
			org, id, _ := bytes.Cut(k, []byte("/"))
			return tx.PutDoc(kind, string(org), string(id), json.RawMessage(v))
		}
	}
	steps := []error{
		step("organisations", &n.Orgs, bolt.BucketOrgs, func(k, v []byte) error {
			var rec store.OrgRecord
			if err := store.Unmarshal(v, &rec); err != nil {
				return err
			}
			return tx.EnsureOrg(string(k), rec.CreatedAt)
		}),
		step("state storages", &n.StateStorages, bolt.BucketStorages, doc(store.KindStorage)),
		step("runners", &n.Runners, bolt.BucketRunners, doc(store.KindRunner)),
		step("organisation tokens", &n.OrgTokens, bolt.BucketOrgTokens, func(_, v []byte) error {
			var rec store.OrgTokenRecord
			if err := store.Unmarshal(v, &rec); err != nil {
				return err
			}
			return tx.PutOrgToken(&rec)
		}),
		step("deployments", &n.Deployments, bolt.BucketDeployments, func(_, v []byte) error {
			rec, _, err := postgres.DecodeDeployment(v)
			if err != nil {
				return err
			}
			return tx.SaveDeployment(rec)
		}),
		step("sources", &n.Sources, bolt.BucketSources, doc(store.KindSource)),
		step("outputs", &n.Outputs, bolt.BucketOutputs, doc(store.KindOutputs)),
		step("reported states", &n.States, bolt.BucketStates, doc(store.KindState)),
		step("schedules", &n.Schedules, bolt.BucketSchedules, doc(store.KindSchedule)),
		step("drift marks", &n.Drifts, bolt.BucketDrifts, doc(store.KindDrift)),
		step("saved plans", &n.Plans, bolt.BucketPlans, doc(store.KindPlan)),
		step("state operations", &n.StateOperations, bolt.BucketStateOperations, doc(store.KindStateOperation)),
		step("state operation queues", &n.StateOperationQueues, bolt.BucketStateOperationQueues, doc(store.KindStateOperationQueue)),
		step("events", &n.Events, bolt.BucketEvents, func(k, v []byte) error {
			org, dep, rest, err := splitChildKey(k, 12)
			if err != nil {
				return err
			}
			return tx.Exec("INSERT INTO events (org, deployment_id, attempt, seq, doc) VALUES ($1, $2, $3, $4, $5)",
				org, dep, int32(binary.BigEndian.Uint32(rest[:4])), int64(binary.BigEndian.Uint64(rest[4:])), json.RawMessage(v))
		}),
		step("log chunks", &n.LogChunks, bolt.BucketLogs, func(k, v []byte) error {
			org, dep, rest, err := splitChildKey(k, 8)
			if err != nil {
				return err
			}
			return tx.PutLogChunk(org, dep, int64(binary.BigEndian.Uint64(rest)), v)
		}),
		step("agent token ids", &n.ReplayIDs, bolt.BucketReplay, func(k, v []byte) error {
			if len(v) != 8 {
				return fmt.Errorf("token id %q has a malformed expiry", k)
			}
			return tx.Exec("INSERT INTO replay (token_id, expires_ns) VALUES ($1, $2)", string(k), int64(binary.BigEndian.Uint64(v)))
		}),
	}
	for _, err := range steps {
		if err != nil {
			return err
		}
	}
	if err := tx.Exec("SELECT setval('deployment_seq', $1, true)", max(int64(b.Bucket(bolt.BucketDeployments).Sequence()), 1)); err != nil {
		return err
	}
	return tx.Exec("UPDATE meta SET value = $1 WHERE name = 'secret'", secret)
}

// splitChildKey splits "org/deployment/" + a binary suffix of size bytes; ids never hold '/',
// so the first two are the separators whatever the suffix holds.
func splitChildKey(k []byte, size int) (org, deployment string, suffix []byte, err error) {
	o, rest, ok1 := bytes.Cut(k, []byte("/"))
	d, rest, ok2 := bytes.Cut(rest, []byte("/"))
	if !ok1 || !ok2 || len(rest) != size {
		return "", "", nil, fmt.Errorf("malformed key %q", k)
	}
	return string(o), string(d), rest, nil
}
