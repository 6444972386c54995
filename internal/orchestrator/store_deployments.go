package orchestrator

import (
	"context"
	"crypto/rand"
	"encoding/base32"
	"encoding/binary"
	"fmt"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/outpost-dev/terraform-provider-outpost/internal/api"
)

// deploymentRecord is a deployment as stored: the public view plus the job lease bookkeeping the
// API does not show. The source lives in its own bucket.
type deploymentRecord struct {
	Org string `json:"org"`
	// Seq orders deployments by creation; it keys the list and queue indexes.
	Seq uint64         `json:"seq"`
	D   api.Deployment `json:"deployment"`
	// Fencing is the last fencing number granted for this deployment; it only grows.
	Fencing int64 `json:"fencing"`
	// Lease is the job lease currently held; nil when none is.
	Lease *leaseRecord `json:"lease,omitempty"`
	// LogCommitted is the log offset of the current grant as the writer counts it: bytes
	// dropped beyond the cap are counted, so the writer never has to know about the cap.
	LogCommitted int64 `json:"log_committed"`

	// What the record looked like when loaded, so saveDeployment can keep indexes and counters
	// right.
	savedStatus api.Status
	savedLeased bool
}

// leaseRecord is a granted job lease.
type leaseRecord struct {
	Fencing   int64     `json:"fencing"`
	ExpiresAt time.Time `json:"expires_at"`
	Instance  string    `json:"instance"`
}

var idEncoding = base32.NewEncoding("abcdefghijklmnopqrstuvwxyz234567").WithPadding(base32.NoPadding)

// newDeploymentID returns a random id that is a DNS-1123 label, since agents put it into
// Kubernetes Job names.
func newDeploymentID() (string, error) {
	b := make([]byte, 8)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("generate deployment id: %w", err)
	}
	return "dep-" + idEncoding.EncodeToString(b), nil
}

func loadDeployment(tx *bolt.Tx, org, id string) (*deploymentRecord, error) {
	var rec deploymentRecord
	ok, err := getJSON(tx.Bucket(bDeployments), key(org, id), &rec)
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, notFound("deployment %q does not exist in organisation %q", id, org)
	}
	rec.savedStatus = rec.D.Status
	rec.savedLeased = rec.Lease != nil
	return &rec, nil
}

// loadIndexedDeployment loads a deployment an index points at. A missing one there is corruption,
// not the caller's fault, so it is an internal error (and never a refusal that would commit).
func loadIndexedDeployment(tx *bolt.Tx, org, id string) (*deploymentRecord, error) {
	rec, err := loadDeployment(tx, org, id)
	if _, refused := asRefusal(err); refused {
		return nil, fmt.Errorf("index entry for missing deployment %s/%s", org, id)
	}
	return rec, err
}

func queueKey(rec *deploymentRecord) []byte {
	return append(prefix(rec.Org, rec.D.RunnerID), u64(rec.Seq)...)
}

// saveDeployment writes rec and brings the queue and lease indexes and the status counters in line
// with it. Every change of a deployment goes through here, which is what keeps them consistent.
func saveDeployment(tx *bolt.Tx, rec *deploymentRecord) error {
	if err := putJSON(tx.Bucket(bDeployments), key(rec.Org, rec.D.ID), rec); err != nil {
		return err
	}
	queue, leased := tx.Bucket(bQueue), tx.Bucket(bLeased)
	wasQueued, isQueued := rec.savedStatus == api.StatusQueued, rec.D.Status == api.StatusQueued
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
	case isLeased && !rec.savedLeased:
		if err := leased.Put(leaseKey, nil); err != nil {
			return err
		}
	case rec.savedLeased && !isLeased:
		if err := leased.Delete(leaseKey); err != nil {
			return err
		}
	}
	if rec.savedStatus != rec.D.Status {
		if err := addStat(tx, rec.savedStatus, -1); err != nil {
			return err
		}
		if err := addStat(tx, rec.D.Status, 1); err != nil {
			return err
		}
	}
	rec.savedStatus, rec.savedLeased = rec.D.Status, rec.Lease != nil
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

// finishDeployment ends a deployment in a terminal status, releases its job lease and puts it
// into the purge indexes of retention.
func finishDeployment(tx *bolt.Tx, rec *deploymentRecord, status api.Status, reason, message string, now time.Time) error {
	rec.D.Status = status
	rec.D.Reason, rec.D.Message = reason, message
	rec.D.FinishedAt = &now
	rec.Lease = nil
	if err := indexEnded(tx, rec); err != nil {
		return err
	}
	return saveDeployment(tx, rec)
}

// createDeployment queues a deployment on a runner of the organisation.
func (s *store) createDeployment(ctx context.Context, org string, in api.DeploymentInput) (*api.Deployment, error) {
	var out api.Deployment
	err := s.update(ctx, func(tx *bolt.Tx) error {
		var runner api.Runner
		ok, err := getJSON(tx.Bucket(bRunners), key(org, in.RunnerID), &runner)
		if err != nil {
			return err
		}
		if !ok {
			return invalid("runner_id", "runner %q does not exist in organisation %q", in.RunnerID, org)
		}
		deployments := tx.Bucket(bDeployments)
		seq, err := deployments.NextSequence()
		if err != nil {
			return err
		}
		id, err := newDeploymentID()
		if err != nil {
			return err
		}
		if deployments.Get(key(org, id)) != nil {
			return fmt.Errorf("deployment id %s collided; retry", id)
		}
		now := s.timeNow()
		timeout := in.TimeoutSeconds
		if timeout == 0 {
			timeout = runner.JobTimeoutSeconds
		}
		rec := &deploymentRecord{Org: org, Seq: seq, D: api.Deployment{
			ID: id, RunnerID: in.RunnerID, Operation: in.Operation, Variables: in.Variables,
			StateKey: in.StateKey, TimeoutSeconds: timeout, Status: api.StatusQueued, Attempt: 1,
			CreatedAt: now,
		}}
		if err := ensureOrg(tx, org, now); err != nil {
			return err
		}
		if err := putJSON(tx.Bucket(bSources), key(org, id), in.Source); err != nil {
			return err
		}
		if err := tx.Bucket(bDeploymentSeq).Put(append(prefix(org), u64(seq)...), []byte(id)); err != nil {
			return err
		}
		if err := saveDeployment(tx, rec); err != nil {
			return err
		}
		out = rec.D
		out.Source = in.Source
		return nil
	})
	if err != nil {
		return nil, err
	}
	return &out, nil
}

func loadSource(tx *bolt.Tx, org, id string) (api.Source, error) {
	var src api.Source
	_, err := getJSON(tx.Bucket(bSources), key(org, id), &src)
	return src, err
}

// deploymentView is the API's view of a stored deployment: its record with the source.
func deploymentView(tx *bolt.Tx, rec *deploymentRecord) (*api.Deployment, error) {
	out := rec.D
	var err error
	out.Source, err = loadSource(tx, rec.Org, rec.D.ID)
	return &out, err
}

func (s *store) getDeployment(ctx context.Context, org, id string) (*api.Deployment, error) {
	return viewOne(ctx, s, func(tx *bolt.Tx) (*api.Deployment, error) {
		rec, err := loadDeployment(tx, org, id)
		if err != nil {
			return nil, err
		}
		return deploymentView(tx, rec)
	})
}

// listDeployments lists newest first, without sources (they can be megabytes each).
func (s *store) listDeployments(ctx context.Context, org, runnerID string, status api.Status) ([]api.Deployment, error) {
	out := []api.Deployment{}
	err := s.view(ctx, func(tx *bolt.Tx) error {
		return scanPrefixReverse(tx.Bucket(bDeploymentSeq), prefix(org), func(_, v []byte) (bool, error) {
			rec, err := loadIndexedDeployment(tx, org, string(v))
			if err != nil {
				return false, err
			}
			if (runnerID == "" || rec.D.RunnerID == runnerID) && (status == "" || rec.D.Status == status) {
				out = append(out, rec.D)
			}
			return true, nil
		})
	})
	return out, err
}

// cancelDeployment ends a queued deployment at once and asks the agent to stop a claimed or
// running one (the agent sees a cancel directive in its next poll).
func (s *store) cancelDeployment(ctx context.Context, org, id string) (*api.Deployment, error) {
	var out *api.Deployment
	err := s.update(ctx, func(tx *bolt.Tx) error {
		rec, err := loadDeployment(tx, org, id)
		if err != nil {
			return err
		}
		now := s.timeNow()
		if _, err := settleLease(tx, rec, now); err != nil {
			return err
		}
		switch st := rec.D.Status; {
		case st.Terminal():
			return conflict("deployment %q already ended with status %s; nothing to cancel", id, st)
		case st == api.StatusQueued:
			if err := finishDeployment(tx, rec, api.StatusCanceled, "canceled", "canceled before it started", now); err != nil {
				return err
			}
			rec.D.CancelRequested = true
		default:
			rec.D.CancelRequested = true
		}
		if err := saveDeployment(tx, rec); err != nil {
			return err
		}
		out, err = deploymentView(tx, rec)
		return err
	})
	return out, err
}

// listEvents returns the deployment's events by attempt, then sequence number.
func (s *store) listEvents(ctx context.Context, org, id string) ([]api.Event, error) {
	out := []api.Event{}
	err := s.view(ctx, func(tx *bolt.Tx) error {
		if _, err := loadDeployment(tx, org, id); err != nil {
			return err
		}
		return scanPrefix(tx.Bucket(bEvents), prefix(org, id), func(_, v []byte) (bool, error) {
			var ev api.Event
			if err := unmarshal(v, &ev); err != nil {
				return false, err
			}
			out = append(out, ev)
			return true, nil
		})
	})
	return out, err
}

func (s *store) getOutputs(ctx context.Context, org, id string) (api.Outputs, error) {
	out := api.Outputs{}
	err := s.view(ctx, func(tx *bolt.Tx) error {
		if _, err := loadDeployment(tx, org, id); err != nil {
			return err
		}
		_, err := getJSON(tx.Bucket(bOutputs), key(org, id), &out)
		return err
	})
	return out, err
}

// statusCounts returns the number of deployments per status, for the metrics gauge.
func (s *store) statusCounts(ctx context.Context) (map[api.Status]int64, error) {
	out := map[api.Status]int64{}
	err := s.view(ctx, func(tx *bolt.Tx) error {
		return tx.Bucket(bStats).ForEach(func(k, v []byte) error {
			if len(v) == 8 {
				out[api.Status(k)] = int64(binary.BigEndian.Uint64(v))
			}
			return nil
		})
	})
	return out, err
}
