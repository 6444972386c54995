package statestore

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// How the stock `kubernetes` backend of Terraform and OpenTofu stores a state (read from
// Terraform 1.11's internal/backend/remote-state/kubernetes; OpenTofu is the same minus
// chunking): the gzipped state JSON sits in data key "tfstate" of Secret
// tfstate-{workspace}-{suffix}; when it exceeds 1 MiB (Terraform only) the gzip stream continues
// in Secrets named tfstate-{workspace}-{suffix}-part-{i} for i = 1, 2, …, all labelled
// tfstate=true, tfstateWorkspace, tfstateSecretSuffix. Its lock is the Lease
// lock-tfstate-{workspace}-{suffix}, holder = the lock ID, lock info JSON in annotation
// app.terraform.io/lock-info.
const (
	stockDataKey        = "tfstate"
	stockLabel          = "tfstate"
	stockLockAnnotation = "app.terraform.io/lock-info"
	maxStockParts       = 10000
)

// ImportOption adjusts ImportFromKubernetesBackend.
type ImportOption func(*importConfig)

type importConfig struct {
	key       string
	overwrite bool
	ignoreLck bool
}

// ImportKey sets the Outpost state key to import into (default: KubernetesBackendKey).
func ImportKey(key string) ImportOption { return func(c *importConfig) { c.key = key } }

// ImportOverwrite allows replacing an existing, different Outpost state (it stays in the
// history as the previous generation).
func ImportOverwrite() ImportOption { return func(c *importConfig) { c.overwrite = true } }

// ImportIgnoreLock imports even while the stock backend's Lease names a holder (use it when the
// holder is known to be dead: the stock backend's locks never expire).
func ImportIgnoreLock() ImportOption { return func(c *importConfig) { c.ignoreLck = true } }

// KubernetesBackendKey is the default Outpost key for a state imported from the stock backend:
// the name of its primary Secret, "tfstate-{workspace}-{suffix}", which is what users know it by.
func KubernetesBackendKey(workspace, suffix string) string {
	return "tfstate-" + workspace + "-" + suffix
}

// ImportResult reports an import.
type ImportResult struct {
	Key        string
	Generation Generation
	// Unchanged is true when the Outpost state already held exactly these bytes.
	Unchanged bool
	// SourceSecrets are the stock Secrets the state was read from, in order.
	SourceSecrets []string
	// IgnoredSecrets are stale "-part-N" Secrets beyond the end of the gzip stream: leftovers
	// of a stock write that crashed while shrinking the state. The stock backend would have
	// read them as part of the state and failed; the import skips them.
	IgnoredSecrets []string
}

// ImportFromKubernetesBackend copies the state of the stock `kubernetes` backend for
// (workspace, secret_suffix) into an Outpost state, so that a team can move off the stock
// backend without `terraform init -migrate-state` from every workstation. The stock objects are
// only read, never changed. The state must be readable and valid (checked like any write); it
// is refused with ErrLocked while the stock Lease names a holder (a run may be in progress),
// unless ImportIgnoreLock is given. Importing the same bytes again is a no-op; importing over a
// different existing Outpost state needs ImportOverwrite.
func (s *Store) ImportFromKubernetesBackend(ctx context.Context, workspace, suffix string, opts ...ImportOption) (ImportResult, error) {
	cfg := importConfig{key: KubernetesBackendKey(workspace, suffix)}
	for _, o := range opts {
		o(&cfg)
	}
	res := ImportResult{Key: cfg.key}
	if err := ValidateKey(cfg.key); err != nil {
		return res, err
	}
	base := "tfstate-" + workspace + "-" + suffix
	source := fmt.Sprintf("kubernetes backend secret %s/%s", s.namespace, base)

	if !cfg.ignoreLck {
		l, err := s.client.CoordinationV1().Leases(s.namespace).Get(ctx, "lock-"+base, metav1.GetOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			return res, fmt.Errorf("import %s: read its lock: %w", source, err)
		}
		if err == nil && l.Spec.HolderIdentity != nil && *l.Spec.HolderIdentity != "" {
			held := HeldLock{Info: LockInfo{ID: *l.Spec.HolderIdentity}}
			_ = json.Unmarshal([]byte(l.Annotations[stockLockAnnotation]), &held.Info)
			held.Info.Holder = *l.Spec.HolderIdentity
			return res, &LockedError{Key: source, Lock: held}
		}
	}

	secrets := s.client.CoreV1().Secrets(s.namespace)
	var parts [][]byte
	for i := 0; i < maxStockParts; i++ {
		name := base
		if i > 0 {
			name = fmt.Sprintf("%s-part-%d", base, i)
		}
		sec, err := secrets.Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			if i == 0 {
				return res, fmt.Errorf("import %s: %w", source, ErrNotFound)
			}
			break
		}
		if err != nil {
			return res, fmt.Errorf("import %s: read %s: %w", source, name, err)
		}
		if sec.Labels[stockLabel] != "true" {
			return res, fmt.Errorf("import %s: secret %s is not a state secret of the kubernetes backend (no %s=true label)", source, name, stockLabel)
		}
		data, ok := sec.Data[stockDataKey]
		if !ok {
			if i == 0 {
				// The stock backend creates the Secret before filling it; an empty one
				// means no state was ever written.
				return res, fmt.Errorf("import %s: %w (secret has no %q data)", source, ErrNotFound, stockDataKey)
			}
			break
		}
		parts = append(parts, data)
		res.SourceSecrets = append(res.SourceSecrets, name)
	}

	state, used, err := decodeStock(parts)
	if err != nil {
		return res, &CorruptError{Key: source, Chunk: -1, Reason: ErrChecksum, Detail: err.Error()}
	}
	res.IgnoredSecrets = res.SourceSecrets[used:]
	res.SourceSecrets = res.SourceSecrets[:used]
	_, err = ParseState(state)
	if err != nil {
		var ise *InvalidStateError
		if errors.As(err, &ise) {
			ise.Key = source
		}
		return res, err
	}

	cur, err := s.getManifest(ctx, cfg.key)
	switch {
	case err == nil && cur.current.SHA256 == sha256Hex(state):
		res.Generation, res.Unchanged = cur.current, true
		return res, nil
	case err == nil && !cfg.overwrite:
		return res, fmt.Errorf("import %s: %w: state %q exists with different content (generation %d); use overwrite to replace it",
			source, ErrAlreadyExists, cfg.key, cur.current.Generation)
	case err != nil && !errors.Is(err, ErrNotFound):
		return res, err
	}
	if err := s.checkWriteLock(ctx, cfg.key, "", ""); err != nil {
		return res, err
	}
	g, err := s.write(ctx, cfg.key, bytes.NewReader(state), WriteOptions{Source: "import from " + source}, false)
	if err != nil {
		return res, err
	}
	res.Generation = g
	s.log.LogAttrs(ctx, slog.LevelInfo, "state imported from the kubernetes backend", slog.String("state_key", cfg.key),
		slog.String("source", source), slog.Int("parts", len(res.SourceSecrets)), slog.Int("ignored_parts", len(res.IgnoredSecrets)))
	return res, nil
}

// decodeStock reassembles the stock backend's parts: one gzip stream split at arbitrary byte
// boundaries. It reads exactly one gzip member (CRC-checked) and reports how many parts the
// stream used; whole parts after its end are stale leftovers. Data of the stock backend's
// pre-gzip era (plain JSON) is accepted when it is a single part.
func decodeStock(parts [][]byte) ([]byte, int, error) {
	if len(parts) == 0 {
		return nil, 0, errors.New("no data")
	}
	if len(parts[0]) < 2 || parts[0][0] != 0x1f || parts[0][1] != 0x8b {
		if len(parts) == 1 && json.Valid(parts[0]) {
			return parts[0], 1, nil
		}
		return nil, 0, errors.New("data is neither gzip nor JSON")
	}
	all := bytes.Join(parts, nil)
	r := bytes.NewReader(all)
	zr, err := gzip.NewReader(r)
	if err != nil {
		return nil, 0, err
	}
	zr.Multistream(false)
	state, err := io.ReadAll(zr)
	if err != nil {
		if errors.Is(err, io.ErrUnexpectedEOF) {
			return nil, 0, fmt.Errorf("gzip stream ends early after %d parts: a part is missing", len(parts))
		}
		return nil, 0, fmt.Errorf("gzip stream damaged: %w", err)
	}
	consumed := len(all) - r.Len()
	used, off := 0, 0
	for used < len(parts) && off < consumed {
		off += len(parts[used])
		used++
	}
	if off != consumed {
		return nil, 0, fmt.Errorf("gzip stream ends inside part %d, followed by %d unexpected bytes", used-1, off-consumed)
	}
	return state, used, nil
}
