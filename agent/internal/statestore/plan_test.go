package statestore

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestPlanFiles keeps a plan file over several chunks, sealed, reads it back whole, refuses it
// once expired or with a chunk gone, and sweeps only what expired.
func TestPlanFiles(t *testing.T) {
	ctx := context.Background()
	key := make([]byte, 32)
	_, _ = rand.Read(key)
	s, cs := newTestStore(t, Options{ChunkSize: 1000, EncryptionKey: key, Scope: "org-a"})
	now := time.Now()
	plan := make([]byte, 2500)
	_, _ = rand.Read(plan)
	if err := s.PutPlan(ctx, "app", "dep-1", plan, now.Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	if err := s.PutPlan(ctx, "app", "dep-2", []byte("short-lived"), now.Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	got, err := s.GetPlan(ctx, "app", "dep-1", now)
	if err != nil || !bytes.Equal(got, plan) {
		t.Fatalf("GetPlan = %d bytes, %v; want the %d bytes put", len(got), err, len(plan))
	}
	secrets, _ := cs.CoreV1().Secrets(s.Namespace()).List(ctx, metav1.ListOptions{})
	for _, sec := range secrets.Items {
		if bytes.Contains(sec.Data[chunkDataKey], plan[:64]) {
			t.Fatalf("secret %s holds the plan in clear although state encryption is on", sec.Name)
		}
	}
	if _, err := s.GetPlan(ctx, "app", "dep-2", now.Add(2*time.Minute)); !errors.Is(err, ErrPlanNotFound) {
		t.Fatalf("GetPlan of an expired plan: %v, want ErrPlanNotFound", err)
	}
	if _, err := s.GetPlan(ctx, "other", "dep-1", now); !errors.Is(err, ErrPlanNotFound) {
		t.Fatalf("GetPlan under another state key: %v, want ErrPlanNotFound", err)
	}
	n, err := s.SweepPlans(ctx, now.Add(2*time.Minute))
	if err != nil || n != 1 {
		t.Fatalf("SweepPlans = %d, %v; want the 1 chunk of the expired plan", n, err)
	}
	if _, err := s.GetPlan(ctx, "app", "dep-1", now); err != nil {
		t.Fatalf("the sweep took a plan that has not expired: %v", err)
	}
	if err := cs.CoreV1().Secrets(s.Namespace()).Delete(ctx, planChunkName(s.planHash("app", "dep-1"), 1), metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.GetPlan(ctx, "app", "dep-1", now); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("GetPlan with a chunk gone: %v, want ErrCorrupt", err)
	}
	if err := s.DeletePlan(ctx, "app", "dep-1"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.GetPlan(ctx, "app", "dep-1", now); !errors.Is(err, ErrPlanNotFound) {
		t.Fatalf("GetPlan after DeletePlan: %v, want ErrPlanNotFound", err)
	}
}
