package provider

import (
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"testing"

	"github.com/hashicorp/terraform-plugin-testing/compare"
	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/knownvalue"
	"github.com/hashicorp/terraform-plugin-testing/plancheck"
	"github.com/hashicorp/terraform-plugin-testing/statecheck"
	"github.com/hashicorp/terraform-plugin-testing/terraform"
	"github.com/hashicorp/terraform-plugin-testing/tfjsonpath"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/rand"

	"github.com/outpost-dev/terraform-provider-outpost/internal/keys"
)

// TestAccKeyPair_inState keeps the private key in state: the plain mode, and rotation by keepers.
func TestAccKeyPair_inState(t *testing.T) {
	e := newAccEnv(t)
	addr := "outpost_key_pair.test"
	config := func(rotation string) string {
		return e.providerConfig() + fmt.Sprintf(`
resource "outpost_key_pair" "test" {
  keepers = { rotation = %q }
}
`, rotation)
	}
	fingerprints := statecheck.CompareValue(compare.ValuesDiffer())
	resource.ParallelTest(t, resource.TestCase{
		ProtoV6ProviderFactories: testAccProtoV6ProviderFactories,
		Steps: []resource.TestStep{
			{
				Config: config("2026-01"),
				ConfigStateChecks: []statecheck.StateCheck{
					statecheck.ExpectKnownValue(addr, tfjsonpath.New("private_key_pem"), knownvalue.StringRegexp(regexp.MustCompile(`^-----BEGIN PRIVATE KEY-----\n`))),
					statecheck.ExpectKnownValue(addr, tfjsonpath.New("public_key_openssh"), knownvalue.StringRegexp(regexp.MustCompile(`^ssh-ed25519 AAAA`))),
					statecheck.ExpectKnownValue(addr, tfjsonpath.New("fingerprint_sha256"), knownvalue.StringRegexp(regexp.MustCompile(`^SHA256:`))),
					statecheck.CompareValuePairs(addr, tfjsonpath.New("id"), addr, tfjsonpath.New("fingerprint_sha256"), compare.ValuesSame()),
					fingerprints.AddStateValue(addr, tfjsonpath.New("fingerprint_sha256")),
					privateKeyInState{},
				},
				Check:            checkKeyPairConsistent(),
				ConfigPlanChecks: resource.ConfigPlanChecks{PostApplyPostRefresh: []plancheck.PlanCheck{plancheck.ExpectEmptyPlan()}},
			},
			{
				// New keepers: a new key, in place.
				Config: config("2026-02"),
				ConfigPlanChecks: resource.ConfigPlanChecks{
					PreApply: []plancheck.PlanCheck{plancheck.ExpectResourceAction(addr, plancheck.ResourceActionUpdate),
						plancheck.ExpectUnknownValue(addr, tfjsonpath.New("fingerprint_sha256")), plancheck.ExpectUnknownValue(addr, tfjsonpath.New("private_key_pem"))},
					PostApplyPostRefresh: []plancheck.PlanCheck{plancheck.ExpectEmptyPlan()},
				},
				ConfigStateChecks: []statecheck.StateCheck{fingerprints.AddStateValue(addr, tfjsonpath.New("fingerprint_sha256"))},
				Check:             checkKeyPairConsistent(),
			},
		},
	})
}

// TestAccKeyPair_kubernetesSecret writes the private key into a Secret: it must be there, and
// nowhere in the state.
func TestAccKeyPair_kubernetesSecret(t *testing.T) {
	e := newAccEnv(t)
	ns := e.namespace()
	addr := "outpost_key_pair.test"
	config := e.providerConfig() + fmt.Sprintf(`
resource "outpost_key_pair" "test" {
  kubernetes_secret {
    namespace = %q
    name      = "runner-key"
  }
}
`, ns)
	rotated := func(rotation string) string {
		return strings.Replace(config, `resource "outpost_key_pair" "test" {`, fmt.Sprintf("resource \"outpost_key_pair\" \"test\" {\n  keepers = { rotation = %q }", rotation), 1)
	}
	sameKey := statecheck.CompareValue(compare.ValuesSame())
	var before string // the fingerprint before a rotation
	resource.ParallelTest(t, resource.TestCase{
		ProtoV6ProviderFactories: testAccProtoV6ProviderFactories,
		CheckDestroy:             e.checkSecretGone(ns, "runner-key"),
		Steps: []resource.TestStep{
			// Create and Read testing
			{
				Config: config,
				ConfigStateChecks: []statecheck.StateCheck{
					statecheck.ExpectKnownValue(addr, tfjsonpath.New("private_key_pem"), knownvalue.Null()),
					statecheck.ExpectKnownValue(addr, tfjsonpath.New("kubernetes_secret").AtMapKey("create_namespace"), knownvalue.Bool(false)),
					noPrivateKeyInState{},
					sameKey.AddStateValue(addr, tfjsonpath.New("fingerprint_sha256")),
				},
				Check:            resource.ComposeTestCheckFunc(checkKeyPairConsistent(), e.checkSecretMatches(ns, "runner-key")),
				ConfigPlanChecks: resource.ConfigPlanChecks{PostApplyPostRefresh: []plancheck.PlanCheck{plancheck.ExpectEmptyPlan()}},
			},
			// ImportState testing: from the Secret, with the CLI and with an import block
			{ResourceName: addr, ImportState: true, ImportStateVerify: true, ImportStateId: ns + "/runner-key"},
			{ResourceName: addr, ImportState: true, ImportStateKind: resource.ImportBlockWithID, ImportStateId: ns + "/runner-key"},
			// create_namespace only matters when the Secret is written: no new key.
			{
				Config: strings.Replace(config, `name      = "runner-key"`, "name      = \"runner-key\"\n    create_namespace = true", 1),
				ConfigPlanChecks: resource.ConfigPlanChecks{
					PreApply:             []plancheck.PlanCheck{plancheck.ExpectResourceAction(addr, plancheck.ResourceActionUpdate)},
					PostApplyPostRefresh: []plancheck.PlanCheck{plancheck.ExpectEmptyPlan()},
				},
				ConfigStateChecks: []statecheck.StateCheck{
					sameKey.AddStateValue(addr, tfjsonpath.New("fingerprint_sha256")),
				},
			},
			// Rotation: the same Secret gets the new key, and keeps the replaced one beside it.
			{
				PreConfig: func() { before = e.keyFingerprint(t, ns, secretKeyPrivate) },
				Config:    rotated("1"),
				ConfigPlanChecks: resource.ConfigPlanChecks{
					PreApply: []plancheck.PlanCheck{plancheck.ExpectResourceAction(addr, plancheck.ResourceActionUpdate),
						plancheck.ExpectUnknownValue(addr, tfjsonpath.New("fingerprint_sha256"))},
					PostApplyPostRefresh: []plancheck.PlanCheck{plancheck.ExpectEmptyPlan()},
				},
				ConfigStateChecks: []statecheck.StateCheck{noPrivateKeyInState{}},
				Check: resource.ComposeTestCheckFunc(checkKeyPairConsistent(), e.checkSecretMatches(ns, "runner-key"),
					func(*terraform.State) error {
						if got := e.keyFingerprint(t, ns, keys.SecretKeyPrevious); got != before {
							return fmt.Errorf("the Secret's previous key is %s, want the replaced key %s", got, before)
						}
						return nil
					}),
			},
			// A Secret an earlier provider wrote immutable is replaced, and still rotates.
			{
				PreConfig: func() {
					before = e.keyFingerprint(t, ns, secretKeyPrivate)
					e.makeImmutable(t, ns, "runner-key")
				},
				Config: rotated("2"),
				ConfigPlanChecks: resource.ConfigPlanChecks{
					PreApply:             []plancheck.PlanCheck{plancheck.ExpectResourceAction(addr, plancheck.ResourceActionUpdate)},
					PostApplyPostRefresh: []plancheck.PlanCheck{plancheck.ExpectEmptyPlan()},
				},
				Check: resource.ComposeTestCheckFunc(checkKeyPairConsistent(), e.checkSecretMatches(ns, "runner-key"),
					func(*terraform.State) error {
						if got := e.keyFingerprint(t, ns, keys.SecretKeyPrevious); got != before {
							return fmt.Errorf("the Secret's previous key is %s, want the replaced key %s", got, before)
						}
						return nil
					}),
			},
			// Moving the key out of the cluster into state needs a new key.
			{
				Config: e.providerConfig() + `resource "outpost_key_pair" "test" {}`,
				ConfigPlanChecks: resource.ConfigPlanChecks{
					PreApply: []plancheck.PlanCheck{plancheck.ExpectResourceAction(addr, plancheck.ResourceActionDestroyBeforeCreate)},
				},
				ConfigStateChecks: []statecheck.StateCheck{privateKeyInState{}},
				Check:             e.checkSecretGone(ns, "runner-key"),
			},
			// The Secret is deleted outside Terraform: the key pair is generated anew.
			{Config: config, ConfigStateChecks: []statecheck.StateCheck{noPrivateKeyInState{}}},
			{
				PreConfig: func() {
					if err := e.kube().CoreV1().Secrets(ns).Delete(context.Background(), "runner-key", metav1.DeleteOptions{}); err != nil {
						t.Fatal(err)
					}
				},
				Config: config,
				ConfigPlanChecks: resource.ConfigPlanChecks{
					PreApply:             []plancheck.PlanCheck{plancheck.ExpectResourceAction(addr, plancheck.ResourceActionCreate)},
					PostApplyPostRefresh: []plancheck.PlanCheck{plancheck.ExpectEmptyPlan()},
				},
				ConfigStateChecks: []statecheck.StateCheck{noPrivateKeyInState{}},
				Check:             e.checkSecretMatches(ns, "runner-key"),
			},
		},
	})
}

// TestAccKeyPair_secretErrors covers an existing Secret, a missing namespace and create_namespace.
func TestAccKeyPair_secretErrors(t *testing.T) {
	e := newAccEnv(t)
	ns := e.namespace()
	_, err := e.kube().CoreV1().Secrets(ns).Create(context.Background(), &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "taken", Namespace: ns},
		StringData: map[string]string{"other": "data"},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	missingNS := "t-keypair-new-" + rand.String(6)
	t.Cleanup(func() {
		_ = e.kube().CoreV1().Namespaces().Delete(context.Background(), missingNS, metav1.DeleteOptions{})
	})
	config := func(ns, name string, create bool) string {
		return e.providerConfig() + fmt.Sprintf(`
resource "outpost_key_pair" "test" {
  kubernetes_secret {
    namespace        = %q
    name             = %q
    create_namespace = %t
  }
}
`, ns, name, create)
	}
	resource.ParallelTest(t, resource.TestCase{
		ProtoV6ProviderFactories: testAccProtoV6ProviderFactories,
		Steps: []resource.TestStep{
			{Config: config(ns, "taken", false), ExpectError: allPhrases("Kubernetes Secret Already Exists", "never overwrites", "Original error:")},
			{Config: config(missingNS, "key", false), ExpectError: allPhrases("Namespace Not Found", "create_namespace = true")},
			{
				Config: config(missingNS, "key", true),
				Check:  e.checkSecretMatches(missingNS, "key"),
			},
		},
	})
	// The Secret it wrote is gone after the test's destroy, and the taken one is untouched.
	if _, err := e.kube().CoreV1().Secrets(ns).Get(context.Background(), "taken", metav1.GetOptions{}); err != nil {
		t.Errorf("the pre-existing Secret was touched: %v", err)
	}
}

func TestKeyPair_invalid(t *testing.T) {
	config := func(block string) string {
		return unitProviderConfig + "resource \"outpost_key_pair\" \"test\" {\n" + block + "\n}\n"
	}
	steps := []resource.TestStep{
		{Config: config(`kubernetes_secret { name = "x" }`), ExpectError: allPhrases("Missing Required Attribute", "namespace")},
		{Config: config(`kubernetes_secret {
  namespace = "Bad_NS"
  name      = "x"
}`), ExpectError: errorPhrase("is not valid as a Kubernetes namespace")},
		{Config: config(`kubernetes_secret {
  namespace = "ns"
  name      = "Bad_Name"
}`), ExpectError: allPhrases("Invalid Secret Name", `"Bad_Name" is not a valid Secret name`)},
	}
	for i := range steps {
		steps[i].PlanOnly = true
	}
	resource.UnitTest(t, resource.TestCase{ProtoV6ProviderFactories: testAccProtoV6ProviderFactories, Steps: steps})
}

// checkKeyPairConsistent checks that the public attributes all describe the same key.
func checkKeyPairConsistent() resource.TestCheckFunc {
	const addr = "outpost_key_pair.test"
	return func(s *terraform.State) error {
		rs, ok := s.RootModule().Resources[addr]
		if !ok {
			return fmt.Errorf("%s not in state", addr)
		}
		a := rs.Primary.Attributes
		pub, err := keys.ParsePublicPEM(a["public_key_pem"])
		if err != nil {
			return err
		}
		if fp := keys.Fingerprint(pub); fp != a["fingerprint_sha256"] {
			return fmt.Errorf("fingerprint %s of public_key_pem, state says %s", fp, a["fingerprint_sha256"])
		}
		ssh, _ := keys.OpenSSH(pub)
		if ssh != a["public_key_openssh"] {
			return fmt.Errorf("public_key_openssh %q does not match public_key_pem", a["public_key_openssh"])
		}
		if priv := a["private_key_pem"]; priv != "" {
			k, err := keys.ParsePrivatePEM([]byte(priv))
			if err != nil {
				return err
			}
			if !pub.Equal(k.Public()) {
				return errors.New("private_key_pem is not the private half of public_key_pem")
			}
		}
		return nil
	}
}

// checkSecretMatches checks that the Secret holds the private half of outpost_key_pair.test.
func (e *accEnv) checkSecretMatches(ns, name string) resource.TestCheckFunc {
	const addr = "outpost_key_pair.test"
	return func(s *terraform.State) error {
		secret, err := e.kube().CoreV1().Secrets(ns).Get(context.Background(), name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		priv, err := keys.ParsePrivatePEM(secret.Data[secretKeyPrivate])
		if err != nil {
			return fmt.Errorf("Secret %s/%s: %w", ns, name, err)
		}
		pub, _ := priv.Public().(ed25519.PublicKey)
		pubPEM, err := keys.EncodePublicPEM(pub)
		if err != nil {
			return err
		}
		if got := s.RootModule().Resources[addr].Primary.Attributes["public_key_pem"]; strings.TrimSpace(got) != strings.TrimSpace(pubPEM) {
			return fmt.Errorf("the Secret's key is not the key pair in state")
		}
		if secret.Labels[labelManagedBy] != managedByProvider {
			return fmt.Errorf("Secret labels %v", secret.Labels)
		}
		return nil
	}
}

func (e *accEnv) checkSecretGone(ns, name string) resource.TestCheckFunc {
	return func(*terraform.State) error {
		_, err := e.kube().CoreV1().Secrets(ns).Get(context.Background(), name, metav1.GetOptions{})
		if !apierrors.IsNotFound(err) {
			return fmt.Errorf("Secret %s/%s: want not found, got %w", ns, name, err)
		}
		return nil
	}
}

// keyFingerprint is the fingerprint of the private key under data key key of Secret runner-key.
func (e *accEnv) keyFingerprint(t *testing.T, ns, key string) string {
	t.Helper()
	const name = "runner-key"
	secret, err := e.kube().CoreV1().Secrets(ns).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	priv, err := keys.ParsePrivatePEM(secret.Data[key])
	if err != nil {
		t.Fatalf("Secret %s/%s, data key %s: %v", ns, name, key, err)
	}
	pub, ok := priv.Public().(ed25519.PublicKey)
	if !ok {
		t.Fatal("not an ed25519 key")
	}
	return keys.Fingerprint(pub)
}

// makeImmutable rewrites a Secret as an earlier provider wrote it: immutable, same content.
func (e *accEnv) makeImmutable(t *testing.T, ns, name string) {
	t.Helper()
	ctx := context.Background()
	secrets := e.kube().CoreV1().Secrets(ns)
	cur, err := secrets.Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := secrets.Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	legacy := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: cur.Labels, Annotations: cur.Annotations},
		Type: cur.Type, Immutable: new(true), Data: map[string][]byte{secretKeyPrivate: cur.Data[secretKeyPrivate]}}
	if _, err := secrets.Create(ctx, legacy, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}
