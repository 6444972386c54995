package statestore

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Plan files: the file of a saved plan (the CLI's `plan -out`), kept beside its state in Secrets
// of the state's namespace until it expires. A plan file holds everything the apply needs,
// sensitive values included, so it is treated like a state: chunked, sealed when state
// encryption is on, scoped to the organisation, never sent anywhere but back to the job runner
// of the apply of that plan. Each plan is a set of immutable chunk Secrets that all carry the
// whole plan's checksum and chunk count, written before the plan is reported saved; a reader
// that finds fewer chunks, or bytes of another checksum, refuses the plan.

// Labels, annotations and limits of plan files.
const (
	// LabelPlan carries the hash of a plan's state key and deployment (in the Store's scope).
	LabelPlan = "outpost.dev/plan"
	// AnnotationPlanExpires is when a plan file expires (RFC 3339): the agent's sweep deletes it
	// then, and no apply reads it after.
	AnnotationPlanExpires = "outpost.dev/plan-expires-at"
	// AnnotationPlanDeployment names the plan deployment the file belongs to.
	AnnotationPlanDeployment = "outpost.dev/plan-deployment"
	// SecretTypePlan is the type of a plan file's chunk Secrets.
	SecretTypePlan = "outpost.dev/plan-chunk"
	// MaxPlanSize is the largest plan file kept (a plan file holds the configuration, the prior
	// state and the changes, so it grows with both).
	MaxPlanSize = 256 << 20

	rolePlan            = "plan"
	annotationPlanSHA   = "outpost.dev/plan-sha256"
	annotationPlanCount = "outpost.dev/plan-chunks"
	annotationKeyID     = "outpost.dev/plan-key-id"
)

// ErrPlanNotFound: no plan file of that deployment is kept (never saved, deleted, or expired).
var ErrPlanNotFound = errors.New("plan file not found")

// planHash names the plan file of deployment planID for state key in the Store's scope.
func (s *Store) planHash(key, planID string) string {
	return ScopedHash(s.opts.Scope, "plan\x00"+key+"\x00"+planID)
}

func planChunkName(hash string, i int) string { return fmt.Sprintf("tfplan-%s-%d", hash, i) }

// PutPlan keeps data as the plan file of deployment planID for state key until expires,
// replacing one kept before.
func (s *Store) PutPlan(ctx context.Context, key, planID string, data []byte, expires time.Time) error {
	if err := ValidateKey(key); err != nil {
		return err
	}
	if len(data) == 0 || len(data) > MaxPlanSize {
		return fmt.Errorf("%w: a plan file of %d bytes; at most %d", ErrTooLarge, len(data), MaxPlanSize)
	}
	if err := s.DeletePlan(ctx, key, planID); err != nil {
		return err
	}
	hash := s.planHash(key, planID)
	sum := sha256Hex(data)
	n := (len(data) + s.opts.ChunkSize - 1) / s.opts.ChunkSize
	for i := range n {
		chunk := data[i*s.opts.ChunkSize : min((i+1)*s.opts.ChunkSize, len(data))]
		if s.sealer != nil {
			var err error
			if chunk, err = s.sealer.seal(chunk, chunkAAD(hash, 0, fmt.Sprintf("%d/%d", i, n))); err != nil {
				return err
			}
		}
		labels := s.labels(s.hash(key), rolePlan)
		labels[LabelPlan] = hash
		immutable := true
		sec := &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{
				Name: planChunkName(hash, i), Namespace: s.namespace, Labels: labels,
				Annotations: map[string]string{
					AnnotationStateKey: key, AnnotationPlanDeployment: planID, AnnotationPlanExpires: expires.UTC().Format(time.RFC3339),
					annotationPlanSHA: sum, annotationPlanCount: strconv.Itoa(n), annotationChunk: strconv.Itoa(i),
				},
			},
			Type: SecretTypePlan, Immutable: &immutable, Data: map[string][]byte{chunkDataKey: chunk},
		}
		if s.sealer != nil {
			sec.Annotations[annotationKeyID] = s.sealer.keyID
		}
		if _, err := s.client.CoreV1().Secrets(s.namespace).Create(ctx, sec, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("store chunk %d of %d of the plan file of %s: %w", i+1, n, planID, err)
		}
	}
	return nil
}

// planChunks lists the chunk Secrets of a plan file.
func (s *Store) planChunks(ctx context.Context, key, planID string) ([]corev1.Secret, error) {
	sel := fmt.Sprintf("%s=%s,%s=%s,%s=%s", LabelManagedBy, ManagedByValue, LabelRole, rolePlan, LabelPlan, s.planHash(key, planID))
	list, err := s.client.CoreV1().Secrets(s.namespace).List(ctx, metav1.ListOptions{LabelSelector: sel})
	if err != nil {
		return nil, fmt.Errorf("list the plan file of %s: %w", planID, err)
	}
	return slices.DeleteFunc(list.Items, func(sec corev1.Secret) bool { return !s.inScope(sec.Labels) }), nil
}

// GetPlan returns the plan file of deployment planID for state key, checked whole against the
// checksum it was stored with. ErrPlanNotFound when none is kept or it expired at now.
func (s *Store) GetPlan(ctx context.Context, key, planID string, now time.Time) ([]byte, error) {
	chunks, err := s.planChunks(ctx, key, planID)
	if err != nil {
		return nil, err
	}
	if len(chunks) == 0 {
		return nil, fmt.Errorf("%w: deployment %s saved no plan of state %q here, or it was deleted", ErrPlanNotFound, planID, key)
	}
	if exp := planExpiry(&chunks[0]); !now.Before(exp) {
		return nil, fmt.Errorf("%w: the plan of deployment %s expired at %s", ErrPlanNotFound, planID, exp.Format(time.RFC3339))
	}
	hash := s.planHash(key, planID)
	sum, count := chunks[0].Annotations[annotationPlanSHA], chunks[0].Annotations[annotationPlanCount]
	n, _ := strconv.Atoi(count)
	if n != len(chunks) {
		return nil, fmt.Errorf("%w: the plan file of deployment %s has %d of its %s chunks", ErrCorrupt, planID, len(chunks), count)
	}
	slices.SortFunc(chunks, func(a, b corev1.Secret) int {
		x, _ := strconv.Atoi(a.Annotations[annotationChunk])
		y, _ := strconv.Atoi(b.Annotations[annotationChunk])
		return x - y
	})
	var buf bytes.Buffer
	for i, c := range chunks {
		data := c.Data[chunkDataKey]
		if kid := c.Annotations[annotationKeyID]; kid != "" {
			op := s.openers[kid]
			if op == nil {
				return nil, fmt.Errorf("%w: the plan file of deployment %s is sealed with key %s, which this agent does not hold", ErrCorrupt, planID, kid)
			}
			if data, err = op.open(data, chunkAAD(hash, 0, fmt.Sprintf("%d/%d", i, n))); err != nil {
				return nil, fmt.Errorf("%w: chunk %d of the plan file of deployment %s: %w", ErrCorrupt, i, planID, err)
			}
		}
		buf.Write(data)
	}
	if sha256Hex(buf.Bytes()) != sum {
		return nil, fmt.Errorf("%w: the plan file of deployment %s does not match its checksum", ErrCorrupt, planID)
	}
	return buf.Bytes(), nil
}

// DeletePlan deletes the plan file of deployment planID for state key; none kept is not an error.
func (s *Store) DeletePlan(ctx context.Context, key, planID string) error {
	chunks, err := s.planChunks(ctx, key, planID)
	if err != nil {
		return err
	}
	return s.deleteSecrets(ctx, chunks)
}

func (s *Store) deleteSecrets(ctx context.Context, secrets []corev1.Secret) error {
	for _, c := range secrets {
		err := s.client.CoreV1().Secrets(s.namespace).Delete(ctx, c.Name, metav1.DeleteOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("delete %s: %w", c.Name, err)
		}
	}
	return nil
}

// SweepPlans deletes the plan files of the Store's scope that expired by now, and returns how
// many chunk Secrets it deleted.
func (s *Store) SweepPlans(ctx context.Context, now time.Time) (int, error) {
	sel := fmt.Sprintf("%s=%s,%s=%s", LabelManagedBy, ManagedByValue, LabelRole, rolePlan)
	list, err := s.client.CoreV1().Secrets(s.namespace).List(ctx, metav1.ListOptions{LabelSelector: sel})
	if err != nil {
		return 0, fmt.Errorf("list plan files: %w", err)
	}
	expired := slices.DeleteFunc(list.Items, func(sec corev1.Secret) bool {
		return !s.inScope(sec.Labels) || now.Before(planExpiry(&sec))
	})
	return len(expired), s.deleteSecrets(ctx, expired)
}

// planExpiry is when a plan chunk expires; one without a readable expiry has expired.
func planExpiry(sec *corev1.Secret) time.Time {
	t, err := time.Parse(time.RFC3339, sec.Annotations[AnnotationPlanExpires])
	if err != nil {
		return time.Time{}
	}
	return t
}

// Current returns the generation of key's current state (its serial and lineage), or
// ErrNotFound when key has no state.
func (s *Store) Current(ctx context.Context, key string) (Generation, error) {
	hist, err := s.History(ctx, key)
	if err != nil {
		return Generation{}, err
	}
	if len(hist) == 0 {
		return Generation{}, ErrNotFound
	}
	cur := hist[0]
	for _, g := range hist[1:] {
		if g.Generation > cur.Generation {
			cur = g
		}
	}
	return cur, nil
}
