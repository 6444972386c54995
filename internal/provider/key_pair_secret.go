package provider

import (
	"context"
	"crypto/ed25519"
	"fmt"

	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/schema/validator"
	"github.com/hashicorp/terraform-plugin-log/tflog"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/kubernetes"

	"github.com/outpost-dev/terraform-provider-outpost/internal/keys"
)

// Names on the objects the provider writes into the cluster.
const (
	// secretKeyPrivate is the data key of the private key; the agent chart reads it
	// (privateKey.secretKey defaults to the same name).
	secretKeyPrivate = keys.SecretKeyPrivate
	// annotationFingerprint records which key a Secret holds, so Delete never removes a Secret
	// whose key was replaced by someone else.
	annotationFingerprint = "outpost.dev/key-fingerprint"
	labelManagedBy        = "app.kubernetes.io/managed-by"
	managedByProvider     = "terraform-provider-outpost"
)

// secretNameValidator checks a Secret name (DNS-1123 subdomain).
func secretNameValidator() validator.String {
	return stringCheck{
		summary:     "Invalid Secret Name",
		description: "must be a valid Kubernetes Secret name (DNS-1123 subdomain)",
		check: func(s string) error {
			if errs := validation.IsDNS1123Subdomain(s); len(errs) > 0 {
				return fmt.Errorf("%q is not a valid Secret name: %s", s, errs[0])
			}
			return nil
		},
	}
}

// secretTarget connects to the cluster of the key Secret and names the Secret.
func (r *keyPairResource) secretTarget(ctx context.Context, s *keyPairSecretModel) (*kubeConn, string, string, diag.Diagnostics) {
	conn, diags := r.data.kubeConnect(ctx)
	return conn, s.Namespace.ValueString(), s.Name.ValueString(), diags
}

// writeSecret creates the Secret holding the private key. It never overwrites an existing one.
func (r *keyPairResource) writeSecret(ctx context.Context, s *keyPairSecretModel, privPEM, fingerprint string) diag.Diagnostics {
	conn, ns, name, diags := r.secretTarget(ctx, s)
	if diags.HasError() {
		return diags
	}
	if s.CreateNamespace.ValueBool() {
		diags.Append(ensureNamespace(ctx, conn.clientset, ns, map[string]string{labelPodSecurity: podSecurityRestricted})...)
		if diags.HasError() {
			return diags
		}
	}
	secret := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{
			Name:        name,
			Namespace:   ns,
			Labels:      map[string]string{labelManagedBy: managedByProvider, "app.kubernetes.io/part-of": "outpost"},
			Annotations: map[string]string{annotationFingerprint: fingerprint},
		},
		// Not immutable: a rotation rewrites it in place (rotateSecret), so the agent, which
		// watches this one Secret, follows.
		Type: corev1.SecretTypeOpaque,
		Data: map[string][]byte{secretKeyPrivate: []byte(privPEM)},
	}
	_, err := conn.clientset.CoreV1().Secrets(ns).Create(ctx, secret, metav1.CreateOptions{FieldManager: managedByProvider})
	switch {
	case apierrors.IsAlreadyExists(err):
		addKubeError(&diags, "Kubernetes Secret Already Exists", fmt.Sprintf("write the private key into Secret %s/%s", ns, name),
			fmt.Sprintf("The Secret already exists. Outpost writes a freshly generated key into a new Secret and never overwrites one. "+
				"Delete it (kubectl -n %s delete secret %s) if it is no longer used, import it as this key pair "+
				"(terraform import <address> %s/%s), or choose another name.", ns, name, ns, name), err)
	case apierrors.IsNotFound(err):
		addKubeError(&diags, "Namespace Not Found", fmt.Sprintf("write the private key into Secret %s/%s", ns, name),
			fmt.Sprintf("Namespace %q does not exist. Set kubernetes_secret { create_namespace = true } or create the namespace first.", ns), err)
	case err != nil:
		addKubeError(&diags, "Unable to Write Key Secret", fmt.Sprintf("write the private key into Secret %s/%s", ns, name),
			"Check the provider's kubernetes block and that its identity may create Secrets in the namespace.", err)
	default:
		tflog.Debug(ctx, "wrote the private key into a Secret", map[string]any{"namespace": ns, "secret": name})
	}
	return diags
}

// rotateSecret rewrites the key Secret for a rotation: the new key, and the one it replaces under
// keys.SecretKeyPrevious. The Secret must still hold the key of fingerprint oldFP (a Secret
// someone else changed is not overwritten). The write is a compare-and-swap on the Secret's
// resourceVersion. A Secret written immutable by an earlier provider cannot be updated: it is
// deleted (only that version of it) and created again, and put back as it was if the create
// fails, so the old key is never lost.
func (r *keyPairResource) rotateSecret(ctx context.Context, s *keyPairSecretModel, oldFP, privPEM, fingerprint string) diag.Diagnostics {
	conn, ns, name, diags := r.secretTarget(ctx, s)
	if diags.HasError() {
		return diags
	}
	what := fmt.Sprintf("rotate the private key in Secret %s/%s", ns, name)
	secrets := conn.clientset.CoreV1().Secrets(ns)
	cur, err := secrets.Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		addKubeError(&diags, "Unable to Read Key Secret", what,
			"The key pair's Secret must exist to be rotated. If it was deleted, the next plan generates a new key pair; run terraform apply again.", err)
		return diags
	}
	old, err := keys.ParsePrivatePEM(cur.Data[secretKeyPrivate])
	oldPub, _ := old.Public().(ed25519.PublicKey)
	if err != nil || keys.Fingerprint(oldPub) != oldFP {
		diags.AddError("Key Secret Changed Outside Terraform",
			fmt.Sprintf("Secret %s/%s no longer holds this key pair's key (%s), so it is not overwritten. Refresh (terraform apply -refresh-only) "+
				"to see what it holds, or delete the Secret to have a new key pair generated.", ns, name, oldFP))
		return diags
	}
	next := cur.DeepCopy()
	next.Data = map[string][]byte{secretKeyPrivate: []byte(privPEM), keys.SecretKeyPrevious: cur.Data[secretKeyPrivate]}
	if next.Annotations == nil {
		next.Annotations = map[string]string{}
	}
	next.Annotations[annotationFingerprint] = fingerprint
	opts := metav1.UpdateOptions{FieldManager: managedByProvider}
	if cur.Immutable == nil || !*cur.Immutable {
		if _, err := secrets.Update(ctx, next, opts); err != nil {
			addKubeError(&diags, "Unable to Rotate Key Secret", what,
				"Check that the provider's identity may update Secrets in the namespace, then apply again; the Secret still holds the old key.", err)
		}
		return diags
	}
	// An immutable Secret from an earlier provider: replace it, this version only.
	uid, version := cur.UID, cur.ResourceVersion
	if err := secrets.Delete(ctx, name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid, ResourceVersion: &version}}); err != nil {
		addKubeError(&diags, "Unable to Rotate Key Secret", what,
			"The Secret was written immutable by an earlier provider version and has to be replaced. Check that the provider's identity may delete Secrets in the namespace, then apply again; the Secret still holds the old key.", err)
		return diags
	}
	next.ObjectMeta = metav1.ObjectMeta{Name: name, Namespace: ns, Labels: cur.Labels, Annotations: next.Annotations}
	next.Immutable = nil
	if _, err := secrets.Create(ctx, next, metav1.CreateOptions{FieldManager: managedByProvider}); err != nil {
		restore := cur.DeepCopy()
		restore.ObjectMeta = metav1.ObjectMeta{Name: name, Namespace: ns, Labels: cur.Labels, Annotations: cur.Annotations}
		_, rerr := secrets.Create(ctx, restore, metav1.CreateOptions{FieldManager: managedByProvider})
		detail := "The old Secret was put back; apply again."
		if rerr != nil {
			detail = "Putting the old Secret back failed too (" + rerr.Error() + "): the agent keeps the keys it holds, but a restarted agent finds no key. Apply again to write a new one."
		}
		addKubeError(&diags, "Unable to Rotate Key Secret", what, detail, err)
	}
	return diags
}

// readSecret returns the public key of the private key in the Secret; found is false when the
// Secret is gone or holds no usable key.
func (r *keyPairResource) readSecret(ctx context.Context, s *keyPairSecretModel) (ed25519.PublicKey, bool, diag.Diagnostics) {
	conn, ns, name, diags := r.secretTarget(ctx, s)
	if diags.HasError() {
		return nil, false, diags
	}
	secret, err := conn.clientset.CoreV1().Secrets(ns).Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, false, nil
	}
	if err != nil {
		addKubeError(&diags, "Unable to Read Key Secret", fmt.Sprintf("read Secret %s/%s", ns, name),
			"Check the provider's kubernetes block and that its identity may read Secrets in the namespace.", err)
		return nil, false, diags
	}
	priv, err := keys.ParsePrivatePEM(secret.Data[secretKeyPrivate])
	if err != nil {
		tflog.Warn(ctx, "the key pair's Secret holds no usable private key", map[string]any{"namespace": ns, "secret": name, "error": err.Error()})
		return nil, false, nil
	}
	pub, ok := priv.Public().(ed25519.PublicKey)
	if !ok {
		return nil, false, nil
	}
	return pub, true, nil
}

// deleteSecret deletes the Secret if it still holds the key with the given fingerprint.
func (r *keyPairResource) deleteSecret(ctx context.Context, s *keyPairSecretModel, fingerprint string) diag.Diagnostics {
	conn, ns, name, diags := r.secretTarget(ctx, s)
	if diags.HasError() {
		return diags
	}
	pub, found, d := r.readSecret(ctx, s)
	diags.Append(d...)
	if diags.HasError() || !found {
		return diags
	}
	if keys.Fingerprint(pub) != fingerprint {
		tflog.Warn(ctx, "not deleting the Secret: it holds another key than this key pair", map[string]any{"namespace": ns, "secret": name})
		return diags
	}
	err := conn.clientset.CoreV1().Secrets(ns).Delete(ctx, name, metav1.DeleteOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		addKubeError(&diags, "Unable to Delete Key Secret", fmt.Sprintf("delete Secret %s/%s", ns, name),
			"Check that the provider's identity may delete Secrets in the namespace, then retry the destroy.", err)
		return diags
	}
	tflog.Debug(ctx, "deleted the key pair's Secret", map[string]any{"namespace": ns, "secret": name})
	return diags
}

// ensureNamespace creates a namespace unless it exists. Namespaces Outpost creates carry the
// managed-by label but are never deleted by it: they may hold Terraform state.
func ensureNamespace(ctx context.Context, cs kubernetes.Interface, name string, labels map[string]string) diag.Diagnostics {
	var diags diag.Diagnostics
	_, err := cs.CoreV1().Namespaces().Get(ctx, name, metav1.GetOptions{})
	if err == nil {
		return nil
	}
	if !apierrors.IsNotFound(err) {
		addKubeError(&diags, "Unable to Read Namespace", fmt.Sprintf("read namespace %q", name),
			"Check the provider's kubernetes block and that its identity may read namespaces.", err)
		return diags
	}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{labelManagedBy: managedByProvider}}}
	for k, v := range labels {
		ns.Labels[k] = v
	}
	_, err = cs.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{FieldManager: managedByProvider})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		addKubeError(&diags, "Unable to Create Namespace", fmt.Sprintf("create namespace %q", name),
			"Check that the provider's identity may create namespaces, or create the namespace yourself.", err)
		return diags
	}
	tflog.Info(ctx, "created namespace", map[string]any{"namespace": name})
	return nil
}
