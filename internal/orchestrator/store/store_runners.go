package store

import (
	"context"
	"crypto/ed25519"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/outpost-dev/terraform-provider-outpost/internal/api"
	"github.com/outpost-dev/terraform-provider-outpost/internal/keys"
	"github.com/outpost-dev/terraform-provider-outpost/internal/podtemplate"
)

// applyRunnerInput copies the mutable fields of in onto r, with the defaults of zero limits.
// The pod template is stored normalized (compact, keys sorted) so that equal templates compare
// equal whatever their formatting; so are the JSON parts of the job pod settings.
func applyRunnerInput(r *api.Runner, in api.RunnerInput) error {
	tpl, err := podtemplate.Normalize(in.Job.PodTemplate)
	if err != nil {
		return Invalid("job.pod_template", "%v", err)
	}
	pod, err := podtemplate.NormalizePod(in.Job.Pod)
	if err != nil {
		return Invalid("job.pod", "%v", err)
	}
	r.ID = in.ID
	r.Type = api.RunnerTypeKubernetesAgent
	r.Description = in.Description
	r.PublicKeys = append([]string(nil), in.PublicKeys...)
	r.Job = api.RunnerJob{Namespace: in.Job.Namespace, ServiceAccount: in.Job.ServiceAccount, PodTemplate: tpl, Pod: pod}
	r.StateStorageID = in.StateStorageID
	r.MaxConcurrency = in.MaxConcurrency
	if r.MaxConcurrency == 0 {
		r.MaxConcurrency = api.DefaultMaxConcurrency
	}
	r.JobTimeoutSeconds = in.JobTimeoutSeconds
	r.RequireApproval = in.RequireApproval
	if r.JobTimeoutSeconds == 0 {
		r.JobTimeoutSeconds = api.DefaultJobTimeoutSeconds
	}
	return nil
}

func requireStorage(tx Tx, org, id string) error {
	ok, err := tx.HasDoc(KindStorage, org, id)
	if err != nil {
		return err
	}
	if !ok {
		return Invalid("state_storage_id", "state storage %q does not exist in organisation %q; create it first", id, org)
	}
	return nil
}

// CreateRunner registers a runner of org, refusing one beyond the runners quota or over a state storage that does not exist.
func (s *Store) CreateRunner(ctx context.Context, org string, in api.RunnerInput) (*api.Runner, error) {
	overQuota, err := s.objectQuota(ctx, KindRunner, org, "runner", "--max-runners-per-org", s.quotas.Runners)
	if err != nil {
		return nil, err
	}
	return createOrgObject(ctx, s, KindRunner, org, in.ID, "runner", func(tx Tx, now time.Time) (api.Runner, error) {
		if err := requireStorage(tx, org, in.StateStorageID); err != nil {
			return api.Runner{}, err
		}
		if overQuota != nil {
			return api.Runner{}, overQuota
		}
		r := api.Runner{CreatedAt: now, UpdatedAt: now}
		return r, applyRunnerInput(&r, in)
	})
}

func getRunnerTx(tx Tx, org, id string) (*api.Runner, error) {
	return getOrgObject[api.Runner](tx, KindRunner, org, id, "runner")
}

// GetRunner returns a runner of org.
func (s *Store) GetRunner(ctx context.Context, org, id string) (*api.Runner, error) {
	return viewOrgObject[api.Runner](ctx, s, KindRunner, org, id, "runner")
}

// ListRunners returns the runners of org in id order.
func (s *Store) ListRunners(ctx context.Context, org string) ([]api.Runner, error) {
	return listOrgObjects[api.Runner](ctx, s, KindRunner, org)
}

// UpdateRunner replaces a runner's settings.
func (s *Store) UpdateRunner(ctx context.Context, org string, in api.RunnerInput) (*api.Runner, error) {
	return updateOrgObject(ctx, s, KindRunner, org, in.ID, "runner", func(tx Tx, r *api.Runner, now time.Time) error {
		if err := requireStorage(tx, org, in.StateStorageID); err != nil {
			return err
		}
		r.UpdatedAt = now
		before := r.PublicKeys
		if err := applyRunnerInput(r, in); err != nil {
			return err
		}
		retireReplacedKeys(r, before, in.RevokeReplacedKeys, now)
		return nil
	})
}

// retireReplacedKeys keeps the keys an update took out of the runner's public keys as retiring
// keys (api.RetiringKey), accepted until the agent signs with a current key or for
// api.KeyRetirement at most; revoke drops them, and every retiring key, at once. A key put back
// stops retiring.
func retireReplacedKeys(r *api.Runner, before []string, revoke bool, now time.Time) {
	current := map[string]bool{}
	for _, f := range currentFingerprints(r) {
		current[f] = true
	}
	retiring := r.RetiringKeys[:0:0]
	for _, k := range r.RetiringKeys {
		if !revoke && !current[k.Fingerprint] && now.Before(k.Until) {
			retiring = append(retiring, k)
		}
	}
	for _, p := range before {
		pub, err := keys.ParsePublicPEM(p)
		if err != nil {
			continue
		}
		f := keys.Fingerprint(pub)
		if revoke || current[f] || slices.ContainsFunc(retiring, func(k api.RetiringKey) bool { return k.Fingerprint == f }) {
			continue
		}
		retiring = append(retiring, api.RetiringKey{PublicKey: p, Fingerprint: f, Until: now.Add(api.KeyRetirement).UTC()})
	}
	r.RetiringKeys = nil
	if len(retiring) > 0 {
		r.RetiringKeys = retiring
	}
}

// currentFingerprints are the fingerprints of the runner's public keys (not the retiring ones).
func currentFingerprints(r *api.Runner) []string {
	out := make([]string, 0, len(r.PublicKeys))
	for _, p := range r.PublicKeys {
		if pub, err := keys.ParsePublicPEM(p); err == nil {
			out = append(out, keys.Fingerprint(pub))
		}
	}
	return out
}

// DeleteRunner removes a runner. Its queued deployments end canceled (nobody could run them),
// and the ones it holds are asked to cancel: the agent can no longer authenticate, so their
// leases run out and the lease rules end them (see settleLease).
func (s *Store) DeleteRunner(ctx context.Context, org, id string) error {
	return s.Update(ctx, func(tx Tx) error {
		if _, err := getRunnerTx(tx, org, id); err != nil {
			return err
		}
		now := s.TimeNow()
		queued, err := tx.Queued(org, id, math.MaxInt)
		if err != nil {
			return err
		}
		leased, err := tx.Leased(org, id)
		if err != nil {
			return err
		}
		for _, deploymentID := range queued {
			rec, err := loadIndexedDeployment(tx, org, deploymentID)
			if err != nil {
				return err
			}
			if err := finishDeployment(tx, rec, api.StatusCanceled, api.ReasonRunnerDeleted, fmt.Sprintf("runner %q was deleted before the deployment started", id), now); err != nil {
				return err
			}
		}
		for _, deploymentID := range leased {
			rec, err := loadIndexedDeployment(tx, org, deploymentID)
			if err != nil {
				return err
			}
			rec.D.CancelRequested = true
			if err := tx.SaveDeployment(rec); err != nil {
				return err
			}
		}
		return tx.DeleteDoc(KindRunner, org, id)
	})
}

// RunnerKeys returns the parsed public keys of a runner, the retiring ones whose time is not up
// included; none (and no error) for an unknown one, as agentauth.KeyLookup wants.
func (s *Store) RunnerKeys(ctx context.Context, org, id string) ([]ed25519.PublicKey, error) {
	var pems []string
	now := s.TimeNow()
	err := s.view(ctx, func(tx Tx) error {
		var r api.Runner
		ok, err := tx.GetDoc(KindRunner, org, id, &r)
		if ok {
			pems = r.PublicKeys
			for _, k := range r.RetiringKeys {
				if now.Before(k.Until) {
					pems = append(pems, k.PublicKey)
				}
			}
		}
		return err
	})
	if err != nil {
		return nil, err
	}
	out := make([]ed25519.PublicKey, 0, len(pems))
	for _, p := range pems {
		if pub, err := keys.ParsePublicPEM(p); err == nil {
			out = append(out, pub)
		}
	}
	return out, nil
}

// RunnerWork is what one runner has to do: its queued deployments and those holding a job lease
// (claimed or running).
type RunnerWork struct {
	Queued, InFlight int
}

// RunnersWork counts each named runner's queue and work in flight from the engine's indexes,
// without reading the deployments themselves; a queue is counted up to most.
func (s *Store) RunnersWork(ctx context.Context, org string, runners []string, most int) (map[string]RunnerWork, error) {
	out := make(map[string]RunnerWork, len(runners))
	err := s.view(ctx, func(tx Tx) error {
		for _, r := range runners {
			q, err := tx.CountRunnerQueue(org, r, most)
			if err != nil {
				return err
			}
			leased, err := tx.Leased(org, r)
			if err != nil {
				return err
			}
			out[r] = RunnerWork{Queued: q, InFlight: len(leased)}
		}
		return nil
	})
	return out, err
}

// NoteRefusal records a refused request of a runner's agent on the runner's status (see
// api.RunnerStatus.LastRefusal). A runner that does not exist is no error: there is nothing to
// note it on. The caller bounds how often it writes (Server.noteRefusal), because a refusal of an
// unknown key comes from a request nobody authenticated.
func (s *Store) NoteRefusal(ctx context.Context, org, runnerID string, ref api.RunnerRefusal) error {
	return s.Update(ctx, func(tx Tx) error {
		var r api.Runner
		ok, err := tx.GetDoc(KindRunner, org, runnerID, &r)
		if err != nil || !ok {
			return err
		}
		r.Status.LastRefusal = &ref
		return tx.PutDoc(KindRunner, org, runnerID, &r)
	})
}
