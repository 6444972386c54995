package provider

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/knownvalue"
	"github.com/hashicorp/terraform-plugin-testing/plancheck"
	"github.com/hashicorp/terraform-plugin-testing/statecheck"
	"github.com/hashicorp/terraform-plugin-testing/terraform"
	"github.com/hashicorp/terraform-plugin-testing/tfjsonpath"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/outpost-dev/terraform-provider-outpost/internal/keys"
)

// TestAccKeyPair_ownKey brings a key made outside Terraform (a PEM file, as openssl writes it)
// and no Secret: the provider writes the Secret, the public key is known at plan (a runner can
// register it in the same plan), and only the path enters the state. The same key as text is an
// update, another key in the file a rotation in place, and a Secret deleted outside Terraform is
// written again with the same key.
func TestAccKeyPair_ownKey(t *testing.T) {
	e := newAccEnv(t)
	ns := e.namespace()
	addr := "outpost_key_pair.test"
	keyFile := func(name string) (file, pubPEM, privPEM string) {
		pub, priv, err := keys.Generate()
		if err != nil {
			t.Fatal(err)
		}
		privPEM, _ = keys.EncodePrivatePEM(priv)
		pubPEM, _ = keys.EncodePublicPEM(pub)
		file = filepath.Join(t.TempDir(), name)
		if err := os.WriteFile(file, []byte(privPEM), 0o600); err != nil {
			t.Fatal(err)
		}
		return file, pubPEM, privPEM
	}
	first, firstPub, firstPriv := keyFile("runner_private_key.pem")
	second, secondPub, _ := keyFile("other.pem")
	config := func(key string) string {
		return e.providerConfig() + fmt.Sprintf(`
resource "outpost_key_pair" "test" {
  %s
  kubernetes_secret {
    namespace = %q
    name      = "own-key"
  }
}
`, key, ns)
	}
	fromFile := func(f string) string { return fmt.Sprintf("private_key_file = %q", f) }
	resource.ParallelTest(t, resource.TestCase{
		ProtoV6ProviderFactories: testAccProtoV6ProviderFactories,
		CheckDestroy:             e.checkSecretGone(ns, "own-key"),
		Steps: []resource.TestStep{
			{
				Config: config(fromFile(first)),
				ConfigPlanChecks: resource.ConfigPlanChecks{
					PreApply:             []plancheck.PlanCheck{plancheck.ExpectKnownValue(addr, tfjsonpath.New("public_key_pem"), knownvalue.StringExact(firstPub))},
					PostApplyPostRefresh: []plancheck.PlanCheck{plancheck.ExpectEmptyPlan()},
				},
				ConfigStateChecks: []statecheck.StateCheck{noPrivateKeyInState{},
					statecheck.ExpectKnownValue(addr, tfjsonpath.New("public_key_pem"), knownvalue.StringExact(firstPub))},
				Check: e.checkSecretMatches(ns, "own-key"),
			},
			{
				// The same key as text: an update, nothing rewritten.
				Config: config(fmt.Sprintf("own_private_key_pem = %q", firstPriv)),
				ConfigPlanChecks: resource.ConfigPlanChecks{
					PreApply:             []plancheck.PlanCheck{plancheck.ExpectResourceAction(addr, plancheck.ResourceActionUpdate)},
					PostApplyPostRefresh: []plancheck.PlanCheck{plancheck.ExpectEmptyPlan()},
				},
				Check: e.checkSecretMatches(ns, "own-key"),
			},
			{
				// Another key in the file: the key pair rotates in place, as with keepers; the Secret
				// holds the new key (and the replaced one beside it).
				Config: config(fromFile(second)),
				ConfigPlanChecks: resource.ConfigPlanChecks{
					PreApply: []plancheck.PlanCheck{plancheck.ExpectResourceAction(addr, plancheck.ResourceActionUpdate),
						plancheck.ExpectKnownValue(addr, tfjsonpath.New("public_key_pem"), knownvalue.StringExact(secondPub))},
					PostApplyPostRefresh: []plancheck.PlanCheck{plancheck.ExpectEmptyPlan()},
				},
				ConfigStateChecks: []statecheck.StateCheck{noPrivateKeyInState{}},
				Check: resource.ComposeTestCheckFunc(e.checkSecretMatches(ns, "own-key"), func(*terraform.State) error {
					sec, err := e.kube().CoreV1().Secrets(ns).Get(context.Background(), "own-key", metav1.GetOptions{})
					if err != nil {
						return err
					}
					if string(sec.Data[keys.SecretKeyPrevious]) != firstPriv {
						return fmt.Errorf("the replaced key is not kept under %s", keys.SecretKeyPrevious)
					}
					return nil
				}),
			},
			{
				// The Secret deleted outside Terraform: written again, with the same key.
				PreConfig: func() {
					if err := e.kube().CoreV1().Secrets(ns).Delete(context.Background(), "own-key", metav1.DeleteOptions{}); err != nil {
						t.Fatal(err)
					}
				},
				Config: config(fromFile(second)),
				ConfigPlanChecks: resource.ConfigPlanChecks{
					PreApply: []plancheck.PlanCheck{plancheck.ExpectResourceAction(addr, plancheck.ResourceActionCreate),
						plancheck.ExpectKnownValue(addr, tfjsonpath.New("public_key_pem"), knownvalue.StringExact(secondPub))},
				},
				Check: e.checkSecretMatches(ns, "own-key"),
			},
		},
	})
}

func TestKeyPair_ownKeyInvalid(t *testing.T) {
	notAKey := filepath.Join(t.TempDir(), "not-a-key.pem")
	if err := os.WriteFile(notAKey, []byte("-----BEGIN PUBLIC KEY-----\nMCow\n-----END PUBLIC KEY-----\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	config := func(body string) string {
		return unitProviderConfig + "resource \"outpost_key_pair\" \"test\" {\n" + body + "\n}\n"
	}
	secret := "\nkubernetes_secret {\n  namespace = \"ns\"\n  name = \"k\"\n}\n"
	steps := []resource.TestStep{
		{Config: config(`private_key_file = "key.pem"`), ExpectError: errorPhrase("kubernetes_secret")},
		{Config: config(`private_key_file = "/nonexistent/key.pem"` + secret), ExpectError: allPhrases("Unable to Read Private Key File", "/nonexistent/key.pem")},
		{Config: config(fmt.Sprintf("private_key_file = %q", notAKey) + secret), ExpectError: allPhrases("Invalid Private Key", "openssl genpkey -algorithm ed25519")},
		{Config: config(`own_private_key_pem = "not a key"` + secret), ExpectError: allPhrases("Invalid Private Key", "PEM")},
	}
	for i := range steps {
		steps[i].PlanOnly = true
	}
	resource.UnitTest(t, resource.TestCase{ProtoV6ProviderFactories: testAccProtoV6ProviderFactories, Steps: steps})
}
