package statestore

import (
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"testing"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// putStockState lays a state down the way the stock kubernetes backend does: the gzip stream
// split into parts, "tfstate-{ws}-{suffix}" then "-part-{i}", labelled tfstate=true.
func putStockState(t *testing.T, c kubernetes.Interface, ns, ws, suffix string, state []byte, partSize int) []string {
	t.Helper()
	z, err := compress(state, -1)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for i, p := range split(z, partSize) {
		name := "tfstate-" + ws + "-" + suffix
		if i > 0 {
			name = fmt.Sprintf("%s-part-%d", name, i)
		}
		_, err := c.CoreV1().Secrets(ns).Create(context.Background(), &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns,
				Labels:      map[string]string{"tfstate": "true", "tfstateWorkspace": ws, "tfstateSecretSuffix": suffix, "app.kubernetes.io/managed-by": "terraform"},
				Annotations: map[string]string{"encoding": "gzip"}},
			Data: map[string][]byte{"tfstate": p},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		names = append(names, name)
	}
	return names
}

func TestImportFromKubernetesBackend(t *testing.T) {
	ctx := context.Background()
	s, c := newTestStore(t, Options{ChunkSize: 16 << 10})
	state := testState("stock-lineage", 9, randomHex(80<<10))
	names := putStockState(t, c, testNS, "default", "app", state, 10<<10)
	if len(names) < 3 {
		t.Fatalf("want several stock parts, got %d", len(names))
	}

	res, err := s.ImportFromKubernetesBackend(ctx, "default", "app")
	if err != nil {
		t.Fatal(err)
	}
	if res.Key != "tfstate-default-app" || res.Generation.Generation != 1 || res.Generation.Serial != 9 ||
		len(res.SourceSecrets) != len(names) || len(res.IgnoredSecrets) != 0 {
		t.Errorf("result = %+v", res)
	}
	got, g, err := s.Read(ctx, res.Key)
	if err != nil || !bytes.Equal(got, state) {
		t.Fatalf("imported state differs: %v", err)
	}
	if g.Source != "import from kubernetes backend secret states/tfstate-default-app" {
		t.Errorf("source = %q", g.Source)
	}
	// Idempotent.
	if res, err := s.ImportFromKubernetesBackend(ctx, "default", "app"); err != nil || !res.Unchanged || res.Generation.Generation != 1 {
		t.Errorf("second import = %+v, %v", res, err)
	}
	// A stale part beyond the end of the stream (a shrinking stock write that crashed) is skipped.
	if _, err := c.CoreV1().Secrets(testNS).Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("tfstate-default-app-part-%d", len(names)), Labels: map[string]string{"tfstate": "true"}},
		Data:       map[string][]byte{"tfstate": []byte("stale leftover bytes")},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	res, err = s.ImportFromKubernetesBackend(ctx, "default", "app", ImportKey("moved/app"))
	if err != nil || len(res.IgnoredSecrets) != 1 || res.Key != "moved/app" {
		t.Fatalf("import with a stale part = %+v, %v", res, err)
	}
	// A different existing state is not overwritten without ImportOverwrite.
	other := testState("other", 1, "x")
	putStockState(t, c, testNS, "dev", "app", other, 1<<20)
	if _, err := s.ImportFromKubernetesBackend(ctx, "dev", "app", ImportKey("moved/app")); !errors.Is(err, ErrAlreadyExists) {
		t.Errorf("import over a different state = %v", err)
	}
	if res, err := s.ImportFromKubernetesBackend(ctx, "dev", "app", ImportKey("moved/app"), ImportOverwrite()); err != nil || res.Generation.Generation != 2 {
		t.Errorf("import with overwrite = %+v, %v", res, err)
	}
	// Missing part → corrupt; absent → not found; locked → locked.
	broken := putStockState(t, c, testNS, "broken", "app", testState("b", 1, randomHex(30<<10)), 4<<10)
	_ = c.CoreV1().Secrets(testNS).Delete(ctx, broken[len(broken)-1], metav1.DeleteOptions{})
	if _, err := s.ImportFromKubernetesBackend(ctx, "broken", "app"); !errors.Is(err, ErrCorrupt) {
		t.Errorf("import with a missing part = %v", err)
	}
	if _, err := s.ImportFromKubernetesBackend(ctx, "nope", "app"); !errors.Is(err, ErrNotFound) {
		t.Errorf("import of an absent state = %v", err)
	}
	holder := "3f1c-lock"
	_, _ = c.CoordinationV1().Leases(testNS).Create(ctx, &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: "lock-tfstate-default-app", Annotations: map[string]string{"app.terraform.io/lock-info": `{"ID":"3f1c-lock","Who":"alice@laptop","Operation":"OperationTypeApply"}`}},
		Spec:       coordinationv1.LeaseSpec{HolderIdentity: &holder},
	}, metav1.CreateOptions{})
	var le *LockedError
	if _, err := s.ImportFromKubernetesBackend(ctx, "default", "app", ImportKey("k2")); !errors.As(err, &le) || le.Lock.Info.Who != "alice@laptop" {
		t.Errorf("import of a locked stock state = %v", err)
	}
	if _, err := s.ImportFromKubernetesBackend(ctx, "default", "app", ImportKey("k2"), ImportIgnoreLock()); err != nil {
		t.Errorf("import ignoring the lock = %v", err)
	}
	// Not a state.
	_, _ = c.CoreV1().Secrets(testNS).Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "tfstate-junk-app", Labels: map[string]string{"tfstate": "true"}},
		Data:       map[string][]byte{"tfstate": []byte(`{"hello":"world"}`)},
	}, metav1.CreateOptions{})
	if _, err := s.ImportFromKubernetesBackend(ctx, "junk", "app"); !errors.Is(err, ErrInvalidState) {
		t.Errorf("import of junk = %v", err)
	}
}

// compress gzips a state at the given level, as the stock backend does.
func compress(state []byte, level int) ([]byte, error) {
	var buf bytes.Buffer
	buf.Grow(len(state)/3 + 64)
	zw, err := gzip.NewWriterLevel(&buf, level)
	if err != nil {
		return nil, err
	}
	if _, err := zw.Write(state); err != nil {
		return nil, err
	}
	if err := zw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// split cuts b into pieces of at most size bytes (at least one piece, possibly empty).
func split(b []byte, size int) [][]byte {
	if len(b) == 0 {
		return [][]byte{{}}
	}
	out := make([][]byte, 0, (len(b)+size-1)/size)
	for len(b) > size {
		out = append(out, b[:size])
		b = b[size:]
	}
	return append(out, b)
}
