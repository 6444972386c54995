package provider

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/hashicorp/terraform-plugin-framework/types"
	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/knownvalue"
	"github.com/hashicorp/terraform-plugin-testing/plancheck"
	"github.com/hashicorp/terraform-plugin-testing/statecheck"
	"github.com/hashicorp/terraform-plugin-testing/terraform"
	"github.com/hashicorp/terraform-plugin-testing/tfjsonpath"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// pullSecretBody is an agent body with image_pull_secret { name, docker_config_json } logging in
// to registry.example.com:5000 with password.
func pullSecretBody(name, password string) string {
	return fmt.Sprintf(`
  wait_for_connection = false
  image_registry      = "registry.example.com:5000"
  image_pull_secret {
    name = %q
    docker_config_json = jsonencode({
      auths = { "registry.example.com:5000" = { username = "puller", password = %q, auth = base64encode("puller:%s") } }
    })
  }
`, name, password, password)
}

// The provider writes the image pull Secret into the agent and the jobs namespaces, names it in
// the chart's imagePullSecrets (so the agent pods use it and the agent hands it to job pods),
// updates it when the login changes without upgrading the release, restores a copy deleted
// outside Terraform, and deletes both on destroy.
func TestAccKubernetesAgent_imagePullSecret(t *testing.T) {
	e := newAccEnv(t)
	ns := e.namespace()
	const name = "registry-login"
	resource.ParallelTest(t, resource.TestCase{
		ProtoV6ProviderFactories: testAccProtoV6ProviderFactories,
		CheckDestroy: resource.ComposeTestCheckFunc(e.checkReleaseGone(ns, defaultReleaseName),
			e.checkPullSecretGone(ns, name), e.checkPullSecretGone(ns+"-jobs", name)),
		Steps: []resource.TestStep{
			{
				Config: e.agentStack(ns, "pull-runner", pullSecretBody(name, "first")),
				Check: resource.ComposeTestCheckFunc(
					e.checkPullSecret(ns, name, "first"), e.checkPullSecret(ns+"-jobs", name, "first"),
					e.checkAgentDeployment(ns, func(d *appsv1.Deployment) error {
						spec := d.Spec.Template.Spec
						if len(spec.ImagePullSecrets) != 1 || spec.ImagePullSecrets[0].Name != name {
							return fmt.Errorf("agent pods' imagePullSecrets %v, want [%s]", spec.ImagePullSecrets, name)
						}
						if img := spec.Containers[0].Image; !strings.HasPrefix(img, "registry.example.com:5000/outpost-dev/outpost-agent:") {
							return fmt.Errorf("agent image %s, want it from registry.example.com:5000", img)
						}
						return nil
					}),
					e.checkAgentSettings(ns, func(setting func(string) string) error {
						if got := setting("jobs.imagePullSecrets"); got != `["`+name+`"]` {
							return fmt.Errorf("the agent does not hand %s on to job pods (jobs.imagePullSecrets %s)", name, got)
						}
						return nil
					}),
				),
			},
			{
				// A new password: both Secrets change, the release does not.
				Config: e.agentStack(ns, "pull-runner", pullSecretBody(name, "second")),
				ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{
					plancheck.ExpectResourceAction(agentAddr, plancheck.ResourceActionUpdate),
					plancheck.ExpectKnownValue(agentAddr, tfjsonpath.New("revision"), knownvalue.Int64Exact(1)),
				}},
				Check: resource.ComposeTestCheckFunc(e.checkPullSecret(ns, name, "second"), e.checkPullSecret(ns+"-jobs", name, "second")),
				ConfigStateChecks: []statecheck.StateCheck{
					statecheck.ExpectKnownValue(agentAddr, tfjsonpath.New("revision"), knownvalue.Int64Exact(1)),
				},
			},
			{
				// The jobs namespace's copy deleted by hand: the plan shows it, the apply restores it.
				PreConfig: func() {
					if err := e.kube().CoreV1().Secrets(ns+"-jobs").Delete(context.Background(), name, metav1.DeleteOptions{}); err != nil {
						t.Fatal(err)
					}
				},
				Config: e.agentStack(ns, "pull-runner", pullSecretBody(name, "second")),
				ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{
					plancheck.ExpectResourceAction(agentAddr, plancheck.ResourceActionUpdate),
				}},
				Check: e.checkPullSecret(ns+"-jobs", name, "second"),
			},
		},
	})
}

// A Secret of the name that this resource did not write is never overwritten; with name alone
// the provider uses existing Secrets as they are, and deletes those it wrote before.
func TestAccKubernetesAgent_imagePullSecretOwnership(t *testing.T) {
	e := newAccEnv(t)
	ns := e.namespace()
	const theirs = "their-login"
	resource.ParallelTest(t, resource.TestCase{
		ProtoV6ProviderFactories: testAccProtoV6ProviderFactories,
		CheckDestroy: resource.ComposeTestCheckFunc(e.checkReleaseGone(ns, defaultReleaseName),
			e.checkPullSecret(ns, theirs, "theirs"), e.checkPullSecret(ns+"-jobs", theirs, "theirs")),
		Steps: []resource.TestStep{
			{
				Config: e.agentStack(ns, "owner-runner", pullSecretBody("ours", "first")),
				Check:  resource.ComposeTestCheckFunc(e.checkPullSecret(ns, "ours", "first"), e.checkPullSecret(ns+"-jobs", "ours", "first")),
			},
			{
				// Someone else's Secret of that name in both namespaces: refused, nothing changed.
				PreConfig: func() {
					for _, n := range []string{ns, ns + "-jobs"} {
						s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: theirs, Namespace: n}, Type: corev1.SecretTypeDockerConfigJson,
							Data: map[string][]byte{corev1.DockerConfigJsonKey: []byte(`{"auths":{"registry.example.com:5000":{"auth":"dGhlaXJzOnRoZWlycw=="}}}`)}}
						if _, err := e.kube().CoreV1().Secrets(n).Create(context.Background(), s, metav1.CreateOptions{}); err != nil {
							t.Fatal(err)
						}
					}
				},
				Config:      e.agentStack(ns, "owner-runner", pullSecretBody(theirs, "mine")),
				ExpectError: allPhrases("Image Pull Secret Already Exists", "was not written by this outpost_kubernetes_agent", "Remove docker_config_json"),
			},
			{
				// Their Secret by name alone: used as it is; ours are deleted.
				Config: e.agentStack(ns, "owner-runner", `
  wait_for_connection = false
  image_pull_secret { name = "`+theirs+`" }
`),
				Check: resource.ComposeTestCheckFunc(
					e.checkPullSecretGone(ns, "ours"), e.checkPullSecretGone(ns+"-jobs", "ours"),
					e.checkPullSecret(ns, theirs, "theirs"),
					e.checkAgentDeployment(ns, func(d *appsv1.Deployment) error {
						if s := d.Spec.Template.Spec.ImagePullSecrets; len(s) != 1 || s[0].Name != theirs {
							return fmt.Errorf("agent pods' imagePullSecrets %v, want [%s]", s, theirs)
						}
						return nil
					}),
				),
			},
		},
	})
}

// checkPullSecret checks that a kubernetes.io/dockerconfigjson Secret logs in with password (or,
// for "theirs", is the one the test made).
func (e *accEnv) checkPullSecret(ns, name, password string) resource.TestCheckFunc {
	return func(*terraform.State) error {
		s, err := e.kube().CoreV1().Secrets(ns).Get(context.Background(), name, metav1.GetOptions{})
		if err != nil {
			return fmt.Errorf("image pull Secret %s/%s: %w", ns, name, err)
		}
		if s.Type != corev1.SecretTypeDockerConfigJson {
			return fmt.Errorf("Secret %s/%s has type %s, want %s", ns, name, s.Type, corev1.SecretTypeDockerConfigJson)
		}
		cfg := string(s.Data[corev1.DockerConfigJsonKey])
		if password == "theirs" {
			if s.Annotations[annotationPullSecretOwner] != "" || !strings.Contains(cfg, "dGhlaXJzOnRoZWlycw==") {
				return fmt.Errorf("Secret %s/%s was changed by the provider: %v %s", ns, name, s.Annotations, cfg)
			}
			return nil
		}
		if !strings.Contains(cfg, `"password":"`+password+`"`) || s.Annotations[annotationPullSecretOwner] == "" {
			return fmt.Errorf("Secret %s/%s holds %s (annotations %v), want the login with password %q written by the provider", ns, name, cfg, s.Annotations, password)
		}
		return nil
	}
}

func (e *accEnv) checkPullSecretGone(ns, name string) resource.TestCheckFunc {
	return func(*terraform.State) error {
		_, err := e.kube().CoreV1().Secrets(ns).Get(context.Background(), name, metav1.GetOptions{})
		if !apierrors.IsNotFound(err) {
			return errors.Join(fmt.Errorf("image pull Secret %s/%s: want it deleted", ns, name), err)
		}
		return nil
	}
}

// The not-connected diagnostic names the registry and the login when an agent pod cannot pull.
func TestImagePullAdvice(t *testing.T) {
	t.Parallel()
	plan := kubernetesAgentModel{Namespace: types.StringValue("outpost-system"), ImageRegistry: types.StringValue("registry.example.com/outpost"),
		ImagePullSecret: &imagePullSecretModel{Name: types.StringValue("outpost-registry"), DockerConfigJSON: types.StringNull()}}
	pods := []string{`pod outpost-agent-1: Pending (agent waiting: ImagePullBackOff Back-off pulling image "registry.example.com/outpost/outpost-dev/outpost-agent:0.1.0": ErrImagePull: … 401 Unauthorized)`}
	got := imagePullAdvice(pods, plan)
	for _, want := range []string{"cannot pull their image", "image_registry (registry.example.com/outpost)", "Secret outpost-system/outpost-registry (image_pull_secret)", "401"} {
		if !strings.Contains(got, want) {
			t.Errorf("advice %q lacks %q", got, want)
		}
	}
	if got := imagePullAdvice([]string{"pod outpost-agent-1: Running"}, plan); got != "" {
		t.Errorf("advice for pods that pulled: %q", got)
	}
	plan.ImagePullSecret, plan.ImageRegistry = nil, types.StringNull()
	if got := imagePullAdvice(pods, plan); !strings.Contains(got, "no image_pull_secret is set") || !strings.Contains(got, "ghcr.io") {
		t.Errorf("advice without a login: %q", got)
	}
}
