package statestore

import (
	"crypto/sha256"
	"encoding/base32"
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Label and annotation keys on the objects this package owns.
const (
	// LabelManagedBy / ManagedByValue mark every object of the store, so that an operator can
	// list them and so that the store never touches an object it did not create.
	LabelManagedBy = "app.kubernetes.io/managed-by"
	ManagedByValue = "outpost-agent"
	// LabelState carries the hash of the state key: it ties a manifest, its chunks and its
	// lock together and lets garbage collection select chunks without reading them.
	LabelState = "outpost.dev/state"
	// LabelRole is "manifest", "chunk" or "lock".
	LabelRole = "outpost.dev/role"
	// LabelGeneration is the generation a chunk belongs to (a decimal integer, so that label
	// selectors can compare it with < and >).
	LabelGeneration = "outpost.dev/generation"
	// AnnotationStateKey holds the raw state key (object names only carry its hash).
	AnnotationStateKey = "outpost.dev/state-key"
	// LabelOrg is the organisation a state belongs to (Options.Scope); absent on states written
	// before states were scoped.
	LabelOrg = "outpost.dev/org-id"
	// AnnotationLockInfo holds the Terraform lock info JSON of the current lock holder.
	AnnotationLockInfo = "outpost.dev/lock-info"
	// AnnotationLockBreak records the last force-unlock of a state's lock: whose lock, who broke
	// it, why and when (LockBreak as JSON).
	AnnotationLockBreak = "outpost.dev/lock-broken"

	roleManifest = "manifest"
	roleChunk    = "chunk"
	roleLock     = "lock"

	// SecretTypeManifest and SecretTypeChunk are the Secret types of the store's objects.
	// Distinct types make the objects recognisable in `kubectl get secrets` and keep other
	// tooling that looks for Opaque secrets away from them.
	SecretTypeManifest = "outpost.dev/state-manifest"
	SecretTypeChunk    = "outpost.dev/state-chunk"

	// MaxKeyLength bounds state keys; the key is stored in an annotation (objects allow
	// 256 KiB of annotations in total) and appears in URLs and messages.
	MaxKeyLength = 1024

	hashLength = 32 // base32 characters = 160 bits of SHA-256
)

var hashEncoding = base32.StdEncoding.WithPadding(base32.NoPadding)

// StateHash returns the name-safe hash of a state key: the first 160 bits of SHA-256(key) in
// lowercase base32 (32 characters of [a-z2-7]). It is a valid DNS-1123 label and label value,
// so keys of any shape (slashes, capitals, underscores, Unicode) map to valid object names —
// unlike the stock backend, which rejects workspaces that are not DNS-1123.
func StateHash(key string) string {
	sum := sha256.Sum256([]byte(key))
	return strings.ToLower(hashEncoding.EncodeToString(sum[:]))[:hashLength]
}

// ScopedHash is StateHash within a scope (an organisation): the same key of two organisations
// names different objects, so their agents can keep states in one namespace. The empty scope is
// StateHash.
func ScopedHash(scope, key string) string {
	if scope == "" {
		return StateHash(key)
	}
	sum := sha256.Sum256([]byte("outpost-state-scope\x00" + scope + "\x00" + key))
	return strings.ToLower(hashEncoding.EncodeToString(sum[:]))[:hashLength]
}

// hash is the name-safe hash of key in the Store's scope.
func (s *Store) hash(key string) string { return ScopedHash(s.opts.Scope, key) }

// manifestName, leaseName: the Store's objects of key.
func (s *Store) manifestName(key string) string { return "tfstate-" + s.hash(key) }
func (s *Store) leaseName(key string) string    { return "tflock-" + s.hash(key) }

// labels are the labels of one of the Store's objects.
func (s *Store) labels(hash, role string) map[string]string {
	l := baseLabels(hash, role)
	if s.opts.Scope != "" {
		l[LabelOrg] = s.opts.Scope
	}
	return l
}

// inScope reports whether an object listed by role belongs to the Store's scope.
func (s *Store) inScope(labels map[string]string) bool {
	return labels[LabelOrg] == s.opts.Scope
}

// ManifestName is the name of the manifest Secret of an unscoped state.
func ManifestName(key string) string { return "tfstate-" + StateHash(key) }

func chunkName(hash string, gen int64, i int) string {
	return fmt.Sprintf("tfstate-%s-g%d-%d", hash, gen, i)
}

// ValidateKey checks that a state key can be stored: non-empty, at most MaxKeyLength bytes,
// valid UTF-8 without control characters.
func ValidateKey(key string) error {
	switch {
	case key == "":
		return fmt.Errorf("%w: empty", ErrInvalidKey)
	case len(key) > MaxKeyLength:
		return fmt.Errorf("%w: %d bytes, at most %d allowed", ErrInvalidKey, len(key), MaxKeyLength)
	case !utf8.ValidString(key):
		return fmt.Errorf("%w: not valid UTF-8", ErrInvalidKey)
	}
	for _, r := range key {
		if unicode.IsControl(r) {
			return fmt.Errorf("%w: %q contains a control character", ErrInvalidKey, key)
		}
	}
	return nil
}

func baseLabels(hash, role string) map[string]string {
	return map[string]string{
		LabelManagedBy: ManagedByValue,
		LabelState:     hash,
		LabelRole:      role,
	}
}
