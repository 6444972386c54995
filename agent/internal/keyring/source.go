package keyring

import (
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/watch"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"

	"github.com/outpost-dev/terraform-provider-outpost/internal/keys"
	"github.com/outpost-dev/terraform-provider-outpost/internal/retry"
)

// Source keeps a Ring filled with the runner's keys.
type Source interface {
	// Run loads the keys into r, and again whenever they change, until ctx ends. report is
	// called with the outcome of every load whose outcome differs from the one before (nil once
	// keys were loaded); a failed load leaves the keys the ring holds in place.
	Run(ctx context.Context, r *Ring, report func(error))
	// String names where the keys come from, for the log.
	String() string
}

// FileSource reads the key from a PEM file (and the key it replaced from keys.SecretKeyPrevious in
// the same directory, when that file exists), again every Interval: a mounted Secret's files
// change in place when the Secret does, a minute or so later.
type FileSource struct {
	Path     string
	Interval time.Duration
}

func (s FileSource) String() string { return "file " + s.Path }

// Run implements Source.
func (s FileSource) Run(ctx context.Context, r *Ring, report func(error)) {
	every := s.Interval
	if every <= 0 {
		every = 10 * time.Second
	}
	var last error
	first := true
	for {
		err := s.load(r)
		if first || !sameError(err, last) {
			report(err)
		}
		first, last = false, err
		if retry.Sleep(ctx, every) != nil {
			return
		}
	}
}

func (s FileSource) load(r *Ring) error {
	data, err := os.ReadFile(s.Path)
	if err != nil {
		return fmt.Errorf("--private-key-file: cannot read the runner's private key: %w; mount the key Secret (data key private-key.pem) or point --private-key-file at the PEM file", err)
	}
	cur, err := keys.ParsePrivatePEM(data)
	if err != nil {
		return fmt.Errorf("--private-key-file %s: %w; it must hold the ed25519 private key (-----BEGIN PRIVATE KEY-----) of the runner's key pair", s.Path, err)
	}
	var prev []ed25519.PrivateKey
	if data, err := os.ReadFile(filepath.Join(filepath.Dir(s.Path), keys.SecretKeyPrevious)); err == nil {
		if k, err := keys.ParsePrivatePEM(data); err == nil {
			prev = append(prev, k)
		}
	}
	r.Set(cur, prev...)
	return nil
}

// SecretSource watches the runner's key Secret through the Kubernetes API: the key in data key
// Key, and the one it replaced in keys.SecretKeyPrevious. It needs get, list and watch on that one
// Secret (the chart's Role grants them by name).
type SecretSource struct {
	Client    typedcorev1.SecretsGetter
	Namespace string
	Name      string
	// Key is the data key of the private key (default private-key.pem).
	Key string
	// Backoff paces the retries after the API failed (default 1 s … 30 s).
	Backoff retry.Backoff
}

func (s SecretSource) String() string {
	return fmt.Sprintf("Secret %s/%s (data key %s)", s.Namespace, s.Name, s.key())
}

func (s SecretSource) key() string {
	if s.Key == "" {
		return keys.SecretKeyPrivate
	}
	return s.Key
}

// Run implements Source: it reads the Secret, then watches it from that version on; a watch
// that ends (the API server's timeout, a restart) is started again after a fresh read.
func (s SecretSource) Run(ctx context.Context, r *Ring, report func(error)) {
	back := s.Backoff
	var last error
	first := true
	note := func(err error) {
		if first || !sameError(err, last) {
			report(err)
		}
		first, last = false, err
	}
	for ctx.Err() == nil {
		version, err := s.read(ctx, r)
		note(err)
		if err == nil {
			back.Reset()
			err = s.watch(ctx, r, version, note)
		}
		if ctx.Err() != nil {
			return
		}
		wait := time.Duration(0)
		if err != nil {
			wait = back.Next(0)
		}
		if retry.Sleep(ctx, wait) != nil {
			return
		}
	}
}

// read loads the Secret once and returns its resourceVersion.
func (s SecretSource) read(ctx context.Context, r *Ring) (string, error) {
	sec, err := s.Client.Secrets(s.Namespace).Get(ctx, s.Name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return "", fmt.Errorf("the runner's key Secret %s/%s does not exist (yet): create it with outpost_key_pair's kubernetes_secret block, or name the right one in the chart value privateKey.existingSecret", s.Namespace, s.Name)
	}
	if apierrors.IsForbidden(err) {
		return "", fmt.Errorf("the agent may not read its key Secret %s/%s: the chart's Role grants get, list and watch on it by name (rbac.create); with rbac.create=false grant them yourself: %w", s.Namespace, s.Name, err)
	}
	if err != nil {
		return "", fmt.Errorf("read the runner's key Secret %s/%s: %w", s.Namespace, s.Name, err)
	}
	return sec.ResourceVersion, s.apply(sec, r)
}

// apply puts the Secret's keys into the ring.
func (s SecretSource) apply(sec *corev1.Secret, r *Ring) error {
	data, ok := sec.Data[s.key()]
	if !ok {
		return fmt.Errorf("the runner's key Secret %s/%s has no data key %q: set the chart value privateKey.secretKey to the key that holds the PEM", s.Namespace, s.Name, s.key())
	}
	cur, err := keys.ParsePrivatePEM(data)
	if err != nil {
		return fmt.Errorf("the runner's key Secret %s/%s, data key %q: %w; it must hold the ed25519 private key (-----BEGIN PRIVATE KEY-----) of the runner's key pair", s.Namespace, s.Name, s.key(), err)
	}
	var prev []ed25519.PrivateKey
	if k, err := keys.ParsePrivatePEM(sec.Data[keys.SecretKeyPrevious]); err == nil && s.key() != keys.SecretKeyPrevious {
		prev = append(prev, k)
	}
	r.Set(cur, prev...)
	return nil
}

// watch applies every change of the Secret until the watch ends; it returns nil when the watch
// simply ran out, so the caller reads again and watches on.
func (s SecretSource) watch(ctx context.Context, r *Ring, version string, note func(error)) error {
	w, err := s.Client.Secrets(s.Namespace).Watch(ctx, metav1.ListOptions{
		FieldSelector:   fields.OneTermEqualSelector("metadata.name", s.Name).String(),
		ResourceVersion: version,
	})
	if err != nil {
		return fmt.Errorf("watch the runner's key Secret %s/%s: %w", s.Namespace, s.Name, err)
	}
	defer w.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case ev, ok := <-w.ResultChan():
			if !ok {
				return nil
			}
			switch ev.Type {
			case watch.Added, watch.Modified:
				if sec, ok := ev.Object.(*corev1.Secret); ok {
					note(s.apply(sec, r))
				}
			case watch.Deleted:
				// The keys held stay in use: the runner may still accept them, and a Secret
				// deleted by mistake must not stop the agent.
				note(fmt.Errorf("the runner's key Secret %s/%s was deleted; the agent goes on with the keys it holds", s.Namespace, s.Name))
			case watch.Error:
				return nil // e.g. the version is too old: read afresh
			}
		}
	}
}

// sameError tells whether two load outcomes would say the same thing.
func sameError(a, b error) bool {
	if a == nil || b == nil {
		return a == nil && b == nil
	}
	return a.Error() == b.Error() || errors.Is(a, b)
}
