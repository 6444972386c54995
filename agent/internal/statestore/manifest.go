package statestore

import (
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Generation describes one committed write of a state. The manifest holds the current one in
// individual data keys (readable with kubectl) and the kept history as JSON.
type Generation struct {
	// Generation numbers increase by at least one per write; a number may be skipped when a
	// write attempt failed after claiming it.
	Generation int64 `json:"generation"`
	// SHA256 (hex) and Size are of the uncompressed state as the client sent it; a read
	// returns exactly these bytes or an error.
	SHA256 string `json:"sha256"`
	Size   int64  `json:"size"`
	// StoredSize is the total size of the chunk payloads (compressed, and sealed when
	// encrypted); Chunks is how many chunk Secrets hold them.
	StoredSize int64  `json:"stored_size"`
	Chunks     int    `json:"chunks"`
	Encoding   string `json:"encoding"`
	// Format is how the chunks are bound to their place (FormatCounted or FormatStreamed).
	Format int `json:"format,omitempty"`
	// Encryption is "" or EncryptionAESGCM; KeyID names the key (see KeyID).
	Encryption string `json:"encryption,omitempty"`
	KeyID      string `json:"key_id,omitempty"`
	// Lineage, Serial and TerraformVersion are copied from the state document (empty for an
	// OpenTofu client-side encrypted state).
	Lineage          string `json:"lineage,omitempty"`
	Serial           int64  `json:"serial"`
	TerraformVersion string `json:"terraform_version,omitempty"`
	ClientEncrypted  bool   `json:"client_encrypted,omitempty"`
	// Resources is how many entries the state's "resources" list has (managed resources and
	// data sources), counted as the body streams by; 0 for a client-side encrypted state.
	Resources int64     `json:"resources,omitempty"`
	UpdatedAt time.Time `json:"updated_at"`
	// Writer is who wrote it (the lock holder, e.g. "job/<id>/<attempt>", when known) and
	// Source how ("write", "restore of generation 3", "import from ..."), for audit.
	Writer string `json:"writer,omitempty"`
	Source string `json:"source,omitempty"`
}

// Manifest data keys.
const (
	keyGeneration       = "generation"
	keySHA256           = "sha256"
	keySize             = "size"
	keyStoredSize       = "stored-size"
	keyChunks           = "chunks"
	keyFormat           = "format"
	keyEncoding         = "encoding"
	keyEncryption       = "encryption"
	keyKeyID            = "key-id"
	keySerial           = "serial"
	keyLineage          = "lineage"
	keyTerraformVersion = "terraform-version"
	keyUpdatedAt        = "updated-at"
	keyHistory          = "history"

	chunkDataKey        = "chunk"
	annotationChunk     = "outpost.dev/chunk"        // "<i>/<n>"
	annotationChunkHash = "outpost.dev/chunk-sha256" // of the stored bytes
)

// checkSizes refuses sizes a reader cannot act on: negative sizes, and chunk counts below one or
// beyond the stored size (every chunk holds at least one stored byte).
func (g Generation) checkSizes() error {
	if g.Size < 0 || g.StoredSize < 0 {
		return fmt.Errorf("generation %d: negative size %d or stored size %d", g.Generation, g.Size, g.StoredSize)
	}
	if g.Chunks < 1 || int64(g.Chunks) > max(1, g.StoredSize) {
		return fmt.Errorf("generation %d: %d chunks for %d stored bytes", g.Generation, g.Chunks, g.StoredSize)
	}
	return nil
}

type manifest struct {
	key string
	// hash names the state's objects: the Store's scoped hash, or the unscoped one of a legacy
	// manifest written before states were scoped by organisation.
	hash    string
	legacy  bool
	current Generation
	// history is newest first and starts with current.
	history []Generation
	obj     *corev1.Secret
}

func (m *manifest) find(gen int64) (Generation, bool) {
	for _, g := range m.history {
		if g.Generation == gen {
			return g, true
		}
	}
	return Generation{}, false
}

func (m *manifest) kept() []int64 {
	out := make([]int64, len(m.history))
	for i, g := range m.history {
		out[i] = g.Generation
	}
	return out
}

func parseManifest(key string, sec *corev1.Secret) (*manifest, error) {
	if got, ok := sec.Annotations[AnnotationStateKey]; !ok || got != key {
		return nil, fmt.Errorf("%w: secret %s belongs to state key %q, not %q", ErrKeyCollision, sec.Name, got, key)
	}
	bad := func(what string, err error) error {
		return &CorruptError{Key: key, Chunk: -1, Object: sec.Name, Reason: ErrChecksum,
			Detail: fmt.Sprintf("manifest field %q unreadable: %v", what, err)}
	}
	d := sec.Data
	m := &manifest{key: key, obj: sec}
	var err error
	c := &m.current
	if c.Generation, err = strconv.ParseInt(string(d[keyGeneration]), 10, 64); err != nil {
		return nil, bad(keyGeneration, err)
	}
	c.SHA256 = string(d[keySHA256])
	if len(c.SHA256) != 64 {
		return nil, bad(keySHA256, fmt.Errorf("%d characters", len(c.SHA256)))
	}
	if c.Size, err = strconv.ParseInt(string(d[keySize]), 10, 64); err != nil {
		return nil, bad(keySize, err)
	}
	if c.StoredSize, err = strconv.ParseInt(string(d[keyStoredSize]), 10, 64); err != nil {
		return nil, bad(keyStoredSize, err)
	}
	if c.Chunks, err = strconv.Atoi(string(d[keyChunks])); err != nil {
		return nil, bad(keyChunks, fmt.Errorf("%q", d[keyChunks]))
	}
	if f := d[keyFormat]; len(f) > 0 {
		if c.Format, err = strconv.Atoi(string(f)); err != nil || (c.Format != FormatCounted && c.Format != FormatStreamed) {
			return nil, bad(keyFormat, fmt.Errorf("unknown format %q", f))
		}
	}
	c.Encoding = string(d[keyEncoding])
	if c.Encoding != EncodingGzip {
		return nil, bad(keyEncoding, fmt.Errorf("unsupported encoding %q", c.Encoding))
	}
	c.Encryption = string(d[keyEncryption])
	c.KeyID = string(d[keyKeyID])
	if len(d[keySerial]) > 0 {
		if c.Serial, err = strconv.ParseInt(string(d[keySerial]), 10, 64); err != nil {
			return nil, bad(keySerial, err)
		}
	}
	c.Lineage = string(d[keyLineage])
	c.TerraformVersion = string(d[keyTerraformVersion])
	if c.UpdatedAt, err = time.Parse(time.RFC3339Nano, string(d[keyUpdatedAt])); err != nil {
		return nil, bad(keyUpdatedAt, err)
	}
	if len(d[keyHistory]) > 0 {
		if err := json.Unmarshal(d[keyHistory], &m.history); err != nil {
			return nil, bad(keyHistory, err)
		}
	}
	// A reader sizes buffers and chunk lists from these numbers, so a manifest edited by hand
	// (or by anyone with Secret write access in the state namespace) must not make it allocate
	// without bound or panic: every generation, current and kept, is checked.
	for i, g := range append([]Generation{*c}, m.history...) {
		if err := g.checkSizes(); err != nil {
			what := keyChunks
			if i > 0 {
				what = fmt.Sprintf("%s[%d]", keyHistory, i-1)
			}
			return nil, bad(what, err)
		}
	}
	// The history entry of the current generation carries the audit fields; the individual
	// keys win for everything else (they are what an operator sees and might repair by hand).
	if len(m.history) > 0 && m.history[0].Generation == c.Generation {
		c.Writer, c.Source, c.ClientEncrypted, c.Resources = m.history[0].Writer, m.history[0].Source, m.history[0].ClientEncrypted, m.history[0].Resources
		m.history[0] = *c
	} else {
		m.history = append([]Generation{*c}, m.history...)
	}
	return m, nil
}

// manifestSecret builds the manifest Secret for a new current generation and its history.
func (s *Store) manifestSecret(key, hash string, cur Generation, history []Generation) (*corev1.Secret, error) {
	hist, err := json.Marshal(history)
	if err != nil {
		return nil, err
	}
	d := map[string][]byte{
		keyGeneration: []byte(strconv.FormatInt(cur.Generation, 10)),
		keySHA256:     []byte(cur.SHA256),
		keySize:       []byte(strconv.FormatInt(cur.Size, 10)),
		keyStoredSize: []byte(strconv.FormatInt(cur.StoredSize, 10)),
		keyChunks:     []byte(strconv.Itoa(cur.Chunks)),
		keyEncoding:   []byte(cur.Encoding),
		keyUpdatedAt:  []byte(cur.UpdatedAt.UTC().Format(time.RFC3339Nano)),
		keyHistory:    hist,
	}
	if !cur.ClientEncrypted {
		d[keySerial] = []byte(strconv.FormatInt(cur.Serial, 10))
		d[keyLineage] = []byte(cur.Lineage)
	}
	if cur.TerraformVersion != "" {
		d[keyTerraformVersion] = []byte(cur.TerraformVersion)
	}
	if cur.Format != FormatCounted {
		d[keyFormat] = []byte(strconv.Itoa(cur.Format))
	}
	if cur.Encryption != "" {
		d[keyEncryption] = []byte(cur.Encryption)
		d[keyKeyID] = []byte(cur.KeyID)
	}
	return &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{
			Name:        "tfstate-" + hash,
			Namespace:   s.namespace,
			Labels:      s.labels(hash, roleManifest),
			Annotations: map[string]string{AnnotationStateKey: key},
		},
		Type: SecretTypeManifest,
		Data: d,
	}, nil
}
