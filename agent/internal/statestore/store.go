package statestore

import (
	"compress/gzip"
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/outpost-dev/terraform-provider-outpost/agent/internal/kubeclient"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/pager"
)

// Defaults of Options.
const (
	// DefaultChunkSize leaves ~124 KiB of headroom under the 1 MiB limit on a Secret's data,
	// and keeps each request well under etcd's default 1.5 MiB request limit.
	DefaultChunkSize       = 900 * 1024
	DefaultKeepGenerations = 10
	// MaxKeepGenerations bounds the kept versions: their history lives in the manifest Secret
	// (about half a KiB each), which must stay far below the 1 MiB limit.
	MaxKeepGenerations  = 100
	DefaultLockDuration = 60 * time.Second
	DefaultParallelism  = 4
	DefaultMaxStateSize = 512 << 20
	maxChunkSize        = 1000 * 1024
	maxLayDownAttempts  = 32
)

// Options tune a Store. The zero value is valid and gives the defaults.
type Options struct {
	// ChunkSize is the most bytes of (compressed, possibly sealed) state per chunk Secret.
	// Default DefaultChunkSize; values above 1000 KiB are clamped.
	ChunkSize int
	// KeepGenerations is how many generations (the current one included) are kept for
	// History, ReadGeneration and Restore: each write keeps the ones before it, in the same
	// manifest swap that makes it current. Default 10, at most MaxKeepGenerations.
	KeepGenerations int
	// MaxGenerationAge, when set, also drops kept generations written longer ago than this
	// (never the current one). Like the count, it is applied when a write commits: a state
	// nobody writes keeps its versions.
	MaxGenerationAge time.Duration
	// LockDuration is the lease duration of locks: a lock that is not renewed within it
	// expires and can be taken over. Default 60 s; rounded to whole seconds, at least 1 s.
	LockDuration time.Duration
	// EncryptionKey, if set (32 bytes), seals every chunk with AES-256-GCM before it is
	// stored. Off by default: Kubernetes encryption at rest for Secrets is the first line of
	// defence; this is for clusters where it is not enabled or not trusted.
	EncryptionKey []byte
	// DecryptionKeys are older keys still accepted for reading, so that keys can be rotated:
	// states written with an old key are re-sealed with EncryptionKey on their next write.
	DecryptionKeys [][]byte
	// CompressionLevel is the gzip level (gzip.BestSpeed … gzip.BestCompression). 0 means
	// gzip.DefaultCompression.
	CompressionLevel int
	// Parallelism bounds concurrent chunk requests per read or write. Default 4.
	Parallelism int
	// MaxStateSize refuses larger states (uncompressed) with ErrTooLarge. Default 512 MiB.
	MaxStateSize int64
	// Scope is the organisation the states belong to. It goes into every object name (and the
	// label outpost.dev/org-id), so agents of two organisations can keep states in one
	// namespace without ever meeting. States written before scoping (no scope) stay readable
	// and move to the scoped names on their next write.
	Scope string
	// Logger receives operational messages (never state contents). Default: slog.Default().
	Logger *slog.Logger
	// Now is the clock used for lock expiry and timestamps. Default time.Now.
	Now func() time.Time
	// BeforeManifestSwap, if set, runs after every chunk of a new generation is written and
	// before the manifest is swapped. A non-nil error aborts the write exactly as a crash at
	// that point would: nothing is cleaned up and the previous generation stays current. It
	// exists for fault-injection tests.
	BeforeManifestSwap func(ctx context.Context, key string, generation int64) error
}

// Store keeps Terraform/OpenTofu states in Secrets of one namespace and locks them with Leases
// in the same namespace. It is safe for concurrent use; concurrent writers of one state are
// serialised by the manifest compare-and-swap (and, in normal use, by the lock).
type Store struct {
	client    kubeclient.Interface
	namespace string
	opts      Options
	log       *slog.Logger
	sealer    *sealer            // nil when encryption is off
	openers   map[string]*sealer // by key id, for reading
}

// New returns a Store over namespace. An invalid EncryptionKey or DecryptionKeys (a
// configuration error that must not be discovered at the first write) is an error.
func New(client kubeclient.Interface, namespace string, opts Options) (*Store, error) {
	if opts.ChunkSize <= 0 {
		opts.ChunkSize = DefaultChunkSize
	}
	opts.ChunkSize = min(opts.ChunkSize, maxChunkSize)
	if opts.KeepGenerations <= 0 {
		opts.KeepGenerations = DefaultKeepGenerations
	}
	opts.KeepGenerations = min(opts.KeepGenerations, MaxKeepGenerations)
	if opts.LockDuration <= 0 {
		opts.LockDuration = DefaultLockDuration
	}
	// Leases count whole seconds; anything shorter would expire the moment it is taken.
	opts.LockDuration = max(opts.LockDuration.Round(time.Second), time.Second)
	if opts.CompressionLevel == 0 {
		opts.CompressionLevel = gzip.DefaultCompression
	}
	if opts.Parallelism <= 0 {
		opts.Parallelism = DefaultParallelism
	}
	if opts.MaxStateSize <= 0 {
		opts.MaxStateSize = DefaultMaxStateSize
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	s := &Store{client: client, namespace: namespace, opts: opts, log: opts.Logger, openers: map[string]*sealer{}}
	if s.log == nil {
		s.log = slog.Default()
	}
	if _, err := gzip.NewWriterLevel(nil, opts.CompressionLevel); err != nil {
		return nil, fmt.Errorf("statestore: %w", err)
	}
	if opts.EncryptionKey != nil {
		sl, err := newSealer(opts.EncryptionKey)
		if err != nil {
			return nil, err
		}
		s.sealer = sl
		s.openers[sl.keyID] = sl
	}
	for _, k := range opts.DecryptionKeys {
		sl, err := newSealer(k)
		if err != nil {
			return nil, err
		}
		s.openers[sl.keyID] = sl
	}
	return s, nil
}

// Namespace is the namespace the Store keeps its objects in.
func (s *Store) Namespace() string { return s.namespace }

// LockDuration is the lease duration of the locks this Store takes.
func (s *Store) LockDuration() time.Duration { return s.opts.LockDuration }

// eachOfRole calls fn for every object of one role (manifests, chunks, locks) in the Store's
// namespace, listing pageSize at a time with client-go's pager, so a namespace of thousands of
// states is never read in one answer.
func (s *Store) eachOfRole(ctx context.Context, role string, pageSize int64, list func(context.Context, metav1.ListOptions) (runtime.Object, error), fn func(runtime.Object) error) error {
	p := pager.New(pager.SimplePageFunc(func(opts metav1.ListOptions) (runtime.Object, error) { return list(ctx, opts) }))
	p.PageSize = pageSize
	sel := fmt.Sprintf("%s=%s,%s=%s", LabelManagedBy, ManagedByValue, LabelRole, role)
	return p.EachListItem(ctx, metav1.ListOptions{LabelSelector: sel}, fn)
}
