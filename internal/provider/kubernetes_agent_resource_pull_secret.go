package provider

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema"
	"github.com/hashicorp/terraform-plugin-framework/schema/validator"
	"github.com/hashicorp/terraform-plugin-framework/types"
	"github.com/hashicorp/terraform-plugin-log/tflog"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The image pull Secret of outpost_kubernetes_agent (block image_pull_secret): the login to a
// private registry that the agent pods, the helm test pod and every job pod (its injecting init
// container from the agent image and main) pull with. Kubernetes only reads a pod's pull Secrets
// from the pod's own namespace, so with docker_config_json the provider keeps one copy in the
// agent namespace and one in the jobs namespace, and names it in the chart's imagePullSecrets
// (which the agent hands on to job pods).

// imagePullSecretModel maps the image_pull_secret block.
type imagePullSecretModel struct {
	Name             types.String `tfsdk:"name"`
	DockerConfigJSON types.String `tfsdk:"docker_config_json"`
}

var pathImagePullSecretName = path.Root("image_pull_secret").AtName("name")

// annotationPullSecretOwner records which outpost_kubernetes_agent (its id, <namespace>/<release>)
// wrote an image pull Secret, so the provider updates and deletes only its own and never a Secret
// of that name someone else made.
const annotationPullSecretOwner = "outpost.dev/image-pull-secret-of"

func imagePullSecretBlock() schema.SingleNestedBlock {
	return schema.SingleNestedBlock{
		MarkdownDescription: "Login to a private registry (a mirror of the Outpost images, see IMAGES.md) for every pod of the agent: the agent " +
			"pods, the `helm test` pod and the job pods (their init container from the agent image, and `main`). The chart's `imagePullSecrets` " +
			"names it, and the agent passes it on to job pods. Kubernetes reads a pod's pull Secrets from the pod's own namespace, so the Secret " +
			"must exist in `namespace` and in `job_namespace`: with `docker_config_json` the provider creates it in both (type " +
			"`kubernetes.io/dockerconfigjson`), updates it when the content changes and deletes it on destroy; with `name` alone it uses " +
			"existing Secrets of that name and warns when one is missing. A wrong login fails the agent pods' start (shown by " +
			"`wait_for_connection`) or each deployment's job pod with the registry's answer.",
		Validators: []validator.Object{blockRequires("name")},
		Attributes: map[string]schema.Attribute{
			"name": schema.StringAttribute{
				MarkdownDescription: "Name of the Secret in `namespace` and `job_namespace`. Required in the block.",
				Optional:            true,
				Validators:          []validator.String{secretNameValidator()},
			},
			"docker_config_json": schema.StringAttribute{
				MarkdownDescription: "Content of the Secret's `.dockerconfigjson`: `{\"auths\": {\"<registry host>\": {\"username\": …, " +
					"\"password\": …, \"auth\": base64(\"<username>:<password>\")}}}`, built with `jsonencode`. The host must be the " +
					"registry of the images (`image_registry`), with its port if it has one. It is kept in Terraform state (marked " +
					"sensitive): use a pull-only robot account. Unset: the Secrets already exist and are not managed by Terraform.",
				Optional:   true,
				Sensitive:  true,
				Validators: []validator.String{dockerConfigJSONValidator()},
			},
		},
	}
}

// dockerConfigJSONValidator checks that a string is a Docker config with at least one login.
func dockerConfigJSONValidator() validator.String {
	return stringCheck{
		summary:     "Invalid Docker Config JSON",
		description: `must be a Docker config JSON with at least one entry under "auths"`,
		check:       checkDockerConfigJSON,
	}
}

func checkDockerConfigJSON(s string) error {
	var cfg struct {
		Auths map[string]struct {
			Auth     string `json:"auth"`
			Username string `json:"username"`
			Password string `json:"password"`
		} `json:"auths"`
	}
	if err := json.Unmarshal([]byte(s), &cfg); err != nil {
		return fmt.Errorf(`not a Docker config JSON; build it with jsonencode({auths = {"registry.example.com" = {username = …, password = …, auth = base64encode("user:password")}}}): %w`, err)
	}
	if len(cfg.Auths) == 0 {
		return errors.New(`it has no login under "auths": name the registry host (with its port, if any) and its username and password`)
	}
	for host, a := range cfg.Auths {
		if a.Auth == "" && (a.Username == "" || a.Password == "") {
			return fmt.Errorf(`the login for %q has neither "auth" nor "username" and "password"`, host)
		}
	}
	return nil
}

// chartValues returns the chart's imagePullSecrets for the block, or nil.
func (m *imagePullSecretModel) chartValues(r *valuesReader) any {
	if m == nil {
		return nil
	}
	name := r.str(m.Name)
	if name == nil {
		return nil
	}
	return []any{name}
}

// pullSecretNamespaces are the namespaces the image pull Secret must exist in.
func pullSecretNamespaces(m kubernetesAgentModel) []string {
	ns, jobs := m.Namespace.ValueString(), m.JobNamespace.ValueString()
	if jobs == "" || jobs == ns {
		return []string{ns}
	}
	return []string{ns, jobs}
}

// managesPullSecret reports whether the model has the provider write the image pull Secret.
func managesPullSecret(m kubernetesAgentModel) bool {
	s := m.ImagePullSecret
	return s != nil && !s.Name.IsNull() && !s.DockerConfigJSON.IsNull() && s.DockerConfigJSON.ValueString() != ""
}

// applyPullSecret creates or updates the image pull Secrets the plan manages, or checks that the
// existing ones it names are there. Before the chart: the agent pods pull with it at once.
func (r *kubernetesAgentResource) applyPullSecret(ctx context.Context, conn *kubeConn, plan kubernetesAgentModel) diag.Diagnostics {
	var diags diag.Diagnostics
	s := plan.ImagePullSecret
	if s == nil || s.Name.IsNull() {
		return nil
	}
	name, owner := s.Name.ValueString(), plan.Namespace.ValueString()+"/"+plan.ReleaseName.ValueString()
	for _, ns := range pullSecretNamespaces(plan) {
		secrets := conn.clientset.CoreV1().Secrets(ns)
		cur, err := secrets.Get(ctx, name, metav1.GetOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			addKubeError(&diags, "Unable to Read Image Pull Secret", fmt.Sprintf("read Secret %s/%s", ns, name),
				"Check the provider's kubernetes block and that its identity may read Secrets in the namespace.", err)
			return diags
		}
		if !managesPullSecret(plan) {
			if apierrors.IsNotFound(err) {
				diags.AddWarning("Image Pull Secret Not Found",
					fmt.Sprintf("Secret %s/%s, named by image_pull_secret, does not exist. Pods in namespace %s cannot pull from a private "+
						"registry until it does: create it there (type kubernetes.io/dockerconfigjson), or set image_pull_secret.docker_config_json "+
						"so the provider creates it in %s.", ns, name, ns, joinNamespaces(pullSecretNamespaces(plan))))
			}
			continue
		}
		data := map[string][]byte{corev1.DockerConfigJsonKey: []byte(s.DockerConfigJSON.ValueString())}
		if apierrors.IsNotFound(err) {
			secret := &corev1.Secret{
				ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns,
					Labels:      map[string]string{labelManagedBy: managedByProvider, "app.kubernetes.io/part-of": "outpost"},
					Annotations: map[string]string{annotationPullSecretOwner: owner}},
				Type: corev1.SecretTypeDockerConfigJson,
				Data: data,
			}
			if _, err := secrets.Create(ctx, secret, metav1.CreateOptions{FieldManager: managedByProvider}); err != nil {
				addKubeError(&diags, "Unable to Create Image Pull Secret", fmt.Sprintf("create Secret %s/%s", ns, name),
					"Check that the provider's identity may create Secrets in the namespace.", err)
				return diags
			}
			tflog.Info(ctx, "created the image pull Secret", map[string]any{"namespace": ns, "name": name})
			continue
		}
		if cur.Annotations[annotationPullSecretOwner] != owner {
			diags.AddAttributeError(pathImagePullSecretName, "Image Pull Secret Already Exists",
				fmt.Sprintf("Secret %s/%s exists and was not written by this outpost_kubernetes_agent (%s), so Outpost does not overwrite it. "+
					"Remove docker_config_json to use it as it is (it must then exist in %s), delete it (kubectl -n %s delete secret %s), "+
					"or choose another image_pull_secret.name.", ns, name, owner, joinNamespaces(pullSecretNamespaces(plan)), ns, name))
			return diags
		}
		if cur.Type == corev1.SecretTypeDockerConfigJson && bytes.Equal(cur.Data[corev1.DockerConfigJsonKey], data[corev1.DockerConfigJsonKey]) {
			continue
		}
		if cur.Type != corev1.SecretTypeDockerConfigJson {
			// The type of a Secret cannot change; only a copy of ours gets here.
			if err := secrets.Delete(ctx, name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
				addKubeError(&diags, "Unable to Replace Image Pull Secret", fmt.Sprintf("delete Secret %s/%s of the wrong type %s", ns, name, cur.Type),
					"Check that the provider's identity may delete Secrets in the namespace.", err)
				return diags
			}
			return r.applyPullSecret(ctx, conn, plan)
		}
		cur.Data = data
		if _, err := secrets.Update(ctx, cur, metav1.UpdateOptions{FieldManager: managedByProvider}); err != nil {
			addKubeError(&diags, "Unable to Update Image Pull Secret", fmt.Sprintf("update Secret %s/%s", ns, name),
				"Check that the provider's identity may update Secrets in the namespace; the next apply tries again.", err)
			return diags
		}
		tflog.Info(ctx, "updated the image pull Secret", map[string]any{"namespace": ns, "name": name})
	}
	return diags
}

// deletePullSecrets deletes the image pull Secrets the old state managed that the new one (nil
// on destroy) no longer uses: another name, or other namespaces. A Secret the new state names
// without docker_config_json stays as it is, for the pods that pull with it.
func (r *kubernetesAgentResource) deletePullSecrets(ctx context.Context, conn *kubeConn, old kubernetesAgentModel, next *kubernetesAgentModel) diag.Diagnostics {
	var diags diag.Diagnostics
	if !managesPullSecret(old) {
		return nil
	}
	name, owner := old.ImagePullSecret.Name.ValueString(), old.Namespace.ValueString()+"/"+old.ReleaseName.ValueString()
	for _, ns := range pullSecretNamespaces(old) {
		if next != nil && next.ImagePullSecret != nil && next.ImagePullSecret.Name.ValueString() == name &&
			slices.Contains(pullSecretNamespaces(*next), ns) {
			continue // still used: managed, or left as it is once docker_config_json is removed
		}
		secrets := conn.clientset.CoreV1().Secrets(ns)
		cur, err := secrets.Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) || (err == nil && cur.Annotations[annotationPullSecretOwner] != owner) {
			continue // gone, or someone else's now
		}
		if err == nil {
			err = secrets.Delete(ctx, name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &cur.UID}})
		}
		if err != nil && !apierrors.IsNotFound(err) {
			addKubeError(&diags, "Unable to Delete Image Pull Secret", fmt.Sprintf("delete Secret %s/%s", ns, name),
				fmt.Sprintf("Delete it yourself (kubectl -n %s delete secret %s) if nothing else uses it.", ns, name), err)
			continue
		}
		tflog.Info(ctx, "deleted the image pull Secret", map[string]any{"namespace": ns, "name": name})
	}
	return diags
}

// readPullSecret sets docker_config_json from the live Secrets the state manages: null when a
// copy is missing, not ours, or differs from the other, so the next plan restores them.
func readPullSecret(ctx context.Context, conn *kubeConn, state *kubernetesAgentModel) diag.Diagnostics {
	var diags diag.Diagnostics
	if !managesPullSecret(*state) {
		return nil
	}
	name, owner := state.ImagePullSecret.Name.ValueString(), state.Namespace.ValueString()+"/"+state.ReleaseName.ValueString()
	var live []byte
	for i, ns := range pullSecretNamespaces(*state) {
		cur, err := conn.clientset.CoreV1().Secrets(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			diags.AddWarning("Unable to Read Image Pull Secret",
				fmt.Sprintf("Secret %s/%s could not be read, so a change made to it outside Terraform goes unnoticed. Check that the "+
					"provider's identity may read Secrets in the namespace.\n\nOriginal error: %s", ns, name, err))
			return diags
		}
		var data []byte
		if err == nil && cur.Annotations[annotationPullSecretOwner] == owner {
			data = cur.Data[corev1.DockerConfigJsonKey]
		}
		if data == nil || (i > 0 && !bytes.Equal(data, live)) {
			tflog.Warn(ctx, "the image pull Secret is missing or changed outside Terraform", map[string]any{"namespace": ns, "name": name})
			state.ImagePullSecret.DockerConfigJSON = types.StringNull()
			return diags
		}
		live = data
	}
	state.ImagePullSecret.DockerConfigJSON = types.StringValue(string(live))
	return diags
}

func joinNamespaces(nss []string) string {
	if len(nss) == 1 {
		return "namespace " + nss[0]
	}
	return "namespaces " + nss[0] + " and " + nss[1]
}

// imagePullAdvice is the line of the not-connected diagnostic for agent pods that cannot pull
// their image (pod lines of podSummary), or "": it names the registry settings and the login.
func imagePullAdvice(pods []string, plan kubernetesAgentModel) string {
	pulling := false
	for _, p := range pods {
		if strings.Contains(p, "ErrImagePull") || strings.Contains(p, "ImagePullBackOff") {
			pulling = true
		}
	}
	if !pulling {
		return ""
	}
	login := "no image_pull_secret is set: a private registry needs one"
	if s := plan.ImagePullSecret; s != nil && !s.Name.IsNull() {
		login = fmt.Sprintf("the login in Secret %s/%s (image_pull_secret) must be valid for that registry", plan.Namespace.ValueString(), s.Name.ValueString())
	}
	registry := "the images' own registry, ghcr.io"
	if !plan.ImageRegistry.IsNull() && plan.ImageRegistry.ValueString() != "" {
		registry = plan.ImageRegistry.ValueString()
	}
	return fmt.Sprintf("- the agent pods cannot pull their image (above): check that image_registry (%s) holds the release's images "+
		"(IMAGES.md, \"Mirroring a release\"), that the nodes reach and trust it, and that %s; a 401 or 403 above is the registry refusing the login\n",
		registry, login)
}
