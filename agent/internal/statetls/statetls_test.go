package statetls

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/outpost-dev/terraform-provider-outpost/internal/testbed"
)

// The CA Secret is written against the test bed's real API server: the compare-and-swap that
// lets two replicas starting at once agree on one CA is the API server's.
func TestMain(m *testing.M) { testbed.Main(m, testbed.Options{}) }

// TestReplicasShareOneCA: the first replica makes the CA and keeps it in the Secret, whether the
// Secret is absent (made) or the chart's empty one (filled); replicas starting at once end up
// with one CA, and a later start reads it.
func TestReplicasShareOneCA(t *testing.T) {
	c := testbed.Shared(t)
	for name, objs := range map[string][]corev1.Secret{
		"absent": nil,
		"empty":  {{ObjectMeta: metav1.ObjectMeta{Name: "state-tls"}}},
	} {
		t.Run(name, func(t *testing.T) {
			secrets := c.Client().CoreV1().Secrets(testbed.NewNamespace(t, c))
			for i := range objs {
				if _, err := secrets.Create(t.Context(), &objs[i], metav1.CreateOptions{}); err != nil {
					t.Fatal(err)
				}
			}
			var wg sync.WaitGroup
			cas := make([]*Authority, 4)
			for i := range cas {
				wg.Go(func() {
					a, err := Load(t.Context(), secrets, "state-tls")
					if err != nil {
						t.Error(err)
					}
					cas[i] = a
				})
			}
			wg.Wait()
			if t.Failed() {
				return
			}
			s, err := secrets.Get(t.Context(), "state-tls", metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			for i, a := range cas {
				if !bytes.Equal(a.PEM, s.Data[CertKey]) {
					t.Errorf("replica %d holds another CA than the Secret's", i)
				}
			}
			again, err := Load(t.Context(), secrets, "state-tls")
			if err != nil || !bytes.Equal(again.PEM, cas[0].PEM) {
				t.Errorf("a later start: %v, same CA %v", err, err == nil && bytes.Equal(again.PEM, cas[0].PEM))
			}
		})
	}
}

// TestSecretWithoutACAIsRefused: a Secret whose data is not a CA stops the start with what to do,
// instead of replacing it (it may be someone else's).
func TestSecretWithoutACAIsRefused(t *testing.T) {
	c := testbed.Shared(t)
	secrets := c.Client().CoreV1().Secrets(testbed.NewNamespace(t, c))
	if _, err := secrets.Create(t.Context(), &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "state-tls"},
		Data: map[string][]byte{CertKey: []byte("not a certificate")}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	_, err := Load(t.Context(), secrets, "state-tls")
	if !errors.Is(err, ErrSecret) {
		t.Fatalf("Load = %v, want ErrSecret", err)
	}
	t.Log(err)
}

// TestServingCertificate: the state backend's certificate is for the Service's names, chains to
// the CA alone, and is issued anew when a third of its life is left.
func TestServingCertificate(t *testing.T) {
	c := testbed.Shared(t)
	a, err := Load(t.Context(), c.Client().CoreV1().Secrets(testbed.NewNamespace(t, c)), "state-tls")
	if err != nil {
		t.Fatal(err)
	}
	hosts := []string{"outpost-agent", "outpost-agent.ns.svc", "10.96.0.10"}
	now := time.Now()
	s := &serving{ca: a, hosts: hosts, now: func() time.Time { return now }}
	c1, err := s.get()
	if err != nil {
		t.Fatal(err)
	}
	for _, h := range hosts {
		if _, err := c1.Leaf.Verify(x509.VerifyOptions{Roots: a.Pool(), DNSName: h}); err != nil {
			t.Errorf("the certificate does not verify for %s with the CA: %v", h, err)
		}
	}
	if _, err := c1.Leaf.Verify(x509.VerifyOptions{Roots: a.Pool(), DNSName: "other.ns.svc"}); err == nil {
		t.Error("the certificate verifies for a name it is not for")
	}
	if c2, _ := s.get(); c2 != c1 {
		t.Error("a fresh certificate was issued anew")
	}
	now = now.Add(servingValidity * 2 / 3)
	if c3, _ := s.get(); c3 == c1 || !c3.Leaf.NotAfter.After(c1.Leaf.NotAfter) {
		t.Error("a certificate with a third of its life left was not issued anew")
	}
	cfg, err := a.ServerConfig(hosts)
	if err != nil || cfg.MinVersion != tls.VersionTLS12 || cfg.GetCertificate == nil {
		t.Fatalf("ServerConfig: %v", err)
	}
}
