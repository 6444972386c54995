package provider

import (
	"context"
	"crypto/ed25519"
	"fmt"
	"strings"

	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/resource"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/booldefault"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/objectplanmodifier"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/planmodifier"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/stringplanmodifier"
	"github.com/hashicorp/terraform-plugin-framework/schema/validator"
	"github.com/hashicorp/terraform-plugin-framework/types"
	"github.com/hashicorp/terraform-plugin-log/tflog"

	"github.com/outpost-dev/terraform-provider-outpost/internal/keys"
)

// Ensure provider defined types fully satisfy framework interfaces.
var (
	_ resource.ResourceWithConfigure   = (*keyPairResource)(nil)
	_ resource.ResourceWithImportState = (*keyPairResource)(nil)
	_ resource.ResourceWithModifyPlan  = (*keyPairResource)(nil)
)

// NewKeyPairResource returns the outpost_key_pair resource.
func NewKeyPairResource() resource.Resource {
	return &keyPairResource{}
}

// keyPairResource generates an ed25519 key pair for a runner's agent. With kubernetes_secret the
// private key goes straight into a cluster Secret and never into Terraform state. The Secret
// handling lives in key_pair_secret.go.
type keyPairResource struct {
	data *providerData
}

// keyPairModel maps outpost_key_pair.
type keyPairModel struct {
	ID                types.String        `tfsdk:"id"`
	Keepers           types.Map           `tfsdk:"keepers"` //< string
	KubernetesSecret  *keyPairSecretModel `tfsdk:"kubernetes_secret"`
	PublicKeyPEM      types.String        `tfsdk:"public_key_pem"`
	PublicKeyOpenSSH  types.String        `tfsdk:"public_key_openssh"`
	FingerprintSHA256 types.String        `tfsdk:"fingerprint_sha256"`
	PrivateKeyPEM     types.String        `tfsdk:"private_key_pem"`
	PrivateKeyFile    types.String        `tfsdk:"private_key_file"`
	OwnPrivateKeyPEM  types.String        `tfsdk:"own_private_key_pem"`
}

// keyPairSecretModel maps the kubernetes_secret block.
type keyPairSecretModel struct {
	Namespace       types.String `tfsdk:"namespace"`
	Name            types.String `tfsdk:"name"`
	CreateNamespace types.Bool   `tfsdk:"create_namespace"`
}

func (r *keyPairResource) Metadata(_ context.Context, req resource.MetadataRequest, resp *resource.MetadataResponse) {
	resp.TypeName = req.ProviderTypeName + "_key_pair"
}

func (r *keyPairResource) Schema(_ context.Context, _ resource.SchemaRequest, resp *resource.SchemaResponse) {
	computed := func(desc string) schema.StringAttribute {
		return schema.StringAttribute{
			MarkdownDescription: desc,
			Computed:            true,
			PlanModifiers:       []planmodifier.String{stringplanmodifier.UseStateForUnknown()},
		}
	}
	resp.Schema = schema.Schema{
		MarkdownDescription: "An ed25519 key pair that identifies a runner's agent to the orchestrator. Give `public_key_pem` to " +
			"`outpost_kubernetes_agent_runner.public_keys` and the private key to the agent.\n\n" +
			"With a `kubernetes_secret` block the private key is written straight into a Kubernetes Secret (data key `" +
			secretKeyPrivate + "`) and **never enters Terraform state**; `private_key_pem` stays null. Without it, " +
			"`private_key_pem` holds the key and the state must be protected like any secret.\n\n" +
			"Changing `keepers` **rotates** the key in place: a new key is generated and, with `kubernetes_secret`, written " +
			"into the same Secret, the key it replaces kept beside it under `" + keys.SecretKeyPrevious + "`. See " +
			"\"Rotating the key\" below for what happens at each step. If the Secret is deleted outside Terraform, the next " +
			"plan generates a new key pair (the old private key is gone and cannot be recovered).\n\n" +
			"To bring your own key, give `private_key_file` (or `own_private_key_pem`) with `kubernetes_secret`: no key is " +
			"generated; the provider writes yours into the Secret, a Secret deleted outside Terraform is written again, and " +
			"another key in the file rotates the key pair in place as `keepers` do.",
		Attributes: map[string]schema.Attribute{
			"id": computed("The key's SHA-256 fingerprint, as `fingerprint_sha256`."),
			"keepers": schema.MapAttribute{
				MarkdownDescription: "Arbitrary values that, when changed, rotate the key: a new key pair replaces this one in " +
					"place (same Secret, new `fingerprint_sha256`). For example `{ rotation = time_rotating.key.id }`. " +
					"Give `public_key_pem` to the runner's `public_keys` and one apply rotates without an outage: the " +
					"orchestrator keeps accepting the replaced key until the agent signs with the new one.",
				ElementType: types.StringType,
				Optional:    true,
			},
			"public_key_pem":     computed("Public key in PEM (PKIX) form, as runners expect it."),
			"public_key_openssh": computed("Public key in OpenSSH `authorized_keys` form (`ssh-ed25519 AAAA...`)."),
			"fingerprint_sha256": computed("SHA-256 fingerprint of the public key as `ssh-keygen -l` prints it (`SHA256:...`)."),
			"private_key_pem": schema.StringAttribute{
				MarkdownDescription: "Private key in PKCS#8 PEM form. Null when `kubernetes_secret` is set: the key then exists only in the Secret.",
				Computed:            true,
				Sensitive:           true,
				PlanModifiers:       []planmodifier.String{stringplanmodifier.UseStateForUnknown()},
			},
		},
		Blocks: map[string]schema.Block{
			"kubernetes_secret": schema.SingleNestedBlock{
				MarkdownDescription: "Write the private key into a new Secret of the provider's Kubernetes cluster instead of the state. " +
					"The Secret must not exist yet. Deleting the key pair deletes the Secret. Changing the block replaces the key pair.",
				PlanModifiers: []planmodifier.Object{objectplanmodifier.RequiresReplaceIf(blockAddedOrRemoved,
					"Adding or removing the block replaces the key pair.", "Adding or removing the block replaces the key pair.")},
				Validators: []validator.Object{blockRequires("namespace", "name")},
				Attributes: map[string]schema.Attribute{
					"namespace": schema.StringAttribute{
						MarkdownDescription: "Namespace of the Secret, normally the agent's namespace (`outpost_kubernetes_agent.namespace`). Required in the block. Changing it replaces the key pair.",
						Optional:            true,
						PlanModifiers:       []planmodifier.String{stringplanmodifier.RequiresReplace()},
						Validators:          []validator.String{namespaceValidator()},
					},
					"name": schema.StringAttribute{
						MarkdownDescription: "Name of the Secret; give the same name to `outpost_kubernetes_agent.private_key_secret.name`. Required in the block. Changing it replaces the key pair.",
						Optional:            true,
						PlanModifiers:       []planmodifier.String{stringplanmodifier.RequiresReplace()},
						Validators:          []validator.String{secretNameValidator()},
					},
					"create_namespace": schema.BoolAttribute{
						MarkdownDescription: "Create the namespace if it does not exist. The key pair is created before the agent is " +
							"installed, so set this when the agent's namespace is new. The namespace is never deleted by Outpost. Defaults to `false`; " +
							"changing it changes nothing else.",
						Optional: true,
						Computed: true,
						Default:  booldefault.StaticBool(false),
					},
				},
			},
		},
	}
	for name, a := range ownKeyAttributes() {
		resp.Schema.Attributes[name] = a
	}
}

func (r *keyPairResource) Configure(_ context.Context, req resource.ConfigureRequest, resp *resource.ConfigureResponse) {
	data, diags := providerDataFrom(req.ProviderData)
	resp.Diagnostics.Append(diags...)
	r.data = data
}

func (r *keyPairResource) Create(ctx context.Context, req resource.CreateRequest, resp *resource.CreateResponse) {
	var plan keyPairModel
	resp.Diagnostics.Append(req.Plan.Get(ctx, &plan)...)
	if resp.Diagnostics.HasError() {
		return
	}
	own, diags := plan.ownKey()
	resp.Diagnostics.Append(diags...)
	if resp.Diagnostics.HasError() {
		return
	}
	pub, priv, diags := keyOrNew(own)
	resp.Diagnostics.Append(diags...)
	if resp.Diagnostics.HasError() {
		return
	}
	privPEM, err := keys.EncodePrivatePEM(priv)
	if err != nil {
		resp.Diagnostics.AddError("Unable to Encode Private Key",
			"The new private key could not be encoded as PKCS#8 PEM. This is always a bug in the provider code and should be reported to the provider developers.\n\nOriginal error: "+err.Error())
		return
	}
	state, err := keyPairModelFromPublic(pub)
	if err != nil {
		resp.Diagnostics.AddError("Unable to Encode Public Key",
			"The new public key could not be encoded. This is always a bug in the provider code and should be reported to the provider developers.\n\nOriginal error: "+err.Error())
		return
	}
	state.Keepers = plan.Keepers
	state.KubernetesSecret = plan.KubernetesSecret
	state.PrivateKeyFile, state.OwnPrivateKeyPEM = plan.PrivateKeyFile, plan.OwnPrivateKeyPEM

	if s := plan.KubernetesSecret; s != nil {
		resp.Diagnostics.Append(r.writeSecret(ctx, s, privPEM, state.FingerprintSHA256.ValueString())...)
		if resp.Diagnostics.HasError() {
			return
		}
		state.PrivateKeyPEM = types.StringNull()
	} else {
		state.PrivateKeyPEM = types.StringValue(privPEM)
	}
	tflog.Debug(ctx, "generated key pair", map[string]any{
		"fingerprint":       state.FingerprintSHA256.ValueString(),
		"kubernetes_secret": plan.KubernetesSecret != nil,
	})
	resp.Diagnostics.Append(resp.State.Set(ctx, state)...)
}

// Read checks that a key pair kept in a Secret still exists there; one kept in state needs no
// reading.
func (r *keyPairResource) Read(ctx context.Context, req resource.ReadRequest, resp *resource.ReadResponse) {
	var state keyPairModel
	resp.Diagnostics.Append(req.State.Get(ctx, &state)...)
	if resp.Diagnostics.HasError() || state.KubernetesSecret == nil {
		return
	}
	pub, found, diags := r.readSecret(ctx, state.KubernetesSecret)
	resp.Diagnostics.Append(diags...)
	if resp.Diagnostics.HasError() {
		return
	}
	fields := map[string]any{"namespace": state.KubernetesSecret.Namespace.ValueString(), "secret": state.KubernetesSecret.Name.ValueString()}
	if !found {
		tflog.Warn(ctx, "the key pair's Secret is gone; the key pair will be generated anew", fields)
		resp.State.RemoveResource(ctx)
		return
	}
	fromSecret, err := keyPairModelFromPublic(pub)
	if err != nil {
		resp.Diagnostics.AddError("Unable to Encode Public Key",
			"The public key of the Secret's private key could not be encoded. This is always a bug in the provider code and should be reported to the provider developers.\n\nOriginal error: "+err.Error())
		return
	}
	// A fingerprint in state that differs means someone replaced the key in the Secret: treat the
	// key pair as gone. (On import the state has no fingerprint yet and adopts the Secret's key.)
	if !state.FingerprintSHA256.IsNull() && state.FingerprintSHA256.ValueString() != fromSecret.FingerprintSHA256.ValueString() {
		fields["fingerprint_state"] = state.FingerprintSHA256.ValueString()
		fields["fingerprint_secret"] = fromSecret.FingerprintSHA256.ValueString()
		tflog.Warn(ctx, "the key pair's Secret holds another key; the key pair will be generated anew", fields)
		resp.State.RemoveResource(ctx)
		return
	}
	fromSecret.Keepers = state.Keepers
	fromSecret.KubernetesSecret = state.KubernetesSecret
	fromSecret.PrivateKeyFile, fromSecret.OwnPrivateKeyPEM = state.PrivateKeyFile, state.OwnPrivateKeyPEM
	if fromSecret.KubernetesSecret.CreateNamespace.IsNull() {
		fromSecret.KubernetesSecret.CreateNamespace = types.BoolValue(false)
	}
	fromSecret.PrivateKeyPEM = types.StringNull()
	resp.Diagnostics.Append(resp.State.Set(ctx, fromSecret)...)
}

// ModifyPlan plans a rotation when keepers change: the key's attributes become unknown, since
// Update generates a new key in place. A key brought in (key_pair_own.go) is planned from it.
func (r *keyPairResource) ModifyPlan(ctx context.Context, req resource.ModifyPlanRequest, resp *resource.ModifyPlanResponse) {
	if req.Plan.Raw.IsNull() {
		return
	}
	var state, plan keyPairModel
	resp.Diagnostics.Append(req.Plan.Get(ctx, &plan)...)
	if resp.Diagnostics.HasError() {
		return
	}
	if plan.bringsKey() {
		planOwnKey(ctx, plan, resp)
		return
	}
	if req.State.Raw.IsNull() {
		return
	}
	resp.Diagnostics.Append(req.State.Get(ctx, &state)...)
	if resp.Diagnostics.HasError() || !rotates(state, plan) {
		return
	}
	for _, a := range []string{"id", "public_key_pem", "public_key_openssh", "fingerprint_sha256"} {
		resp.Diagnostics.Append(resp.Plan.SetAttribute(ctx, path.Root(a), types.StringUnknown())...)
	}
	if plan.KubernetesSecret == nil {
		resp.Diagnostics.Append(resp.Plan.SetAttribute(ctx, path.Root("private_key_pem"), types.StringUnknown())...)
	}
}

// rotates tells whether a plan changes keepers (a null map and an empty one are the same).
func rotates(state, plan keyPairModel) bool {
	bothEmpty := len(state.Keepers.Elements()) == 0 && len(plan.Keepers.Elements()) == 0
	return !bothEmpty && !state.Keepers.Equal(plan.Keepers)
}

// Update rotates the key when keepers changed, or when the key brought in is another one (see
// rotate); otherwise only kubernetes_secret.create_namespace changed, which matters only when
// the Secret is written, or a key brought in came under another path or as text, and the plan
// is stored.
func (r *keyPairResource) Update(ctx context.Context, req resource.UpdateRequest, resp *resource.UpdateResponse) {
	var plan, state keyPairModel
	resp.Diagnostics.Append(req.Plan.Get(ctx, &plan)...)
	resp.Diagnostics.Append(req.State.Get(ctx, &state)...)
	if resp.Diagnostics.HasError() {
		return
	}
	own, diags := plan.ownKey()
	resp.Diagnostics.Append(diags...)
	if resp.Diagnostics.HasError() {
		return
	}
	if (own == nil && !rotates(state, plan)) || (own != nil && sameKey(own, state)) {
		resp.Diagnostics.Append(resp.State.Set(ctx, plan)...)
		return
	}
	next, diags := r.rotate(ctx, state, plan, own)
	resp.Diagnostics.Append(diags...)
	if resp.Diagnostics.HasError() {
		return
	}
	resp.Diagnostics.Append(resp.State.Set(ctx, next)...)
}

// rotate replaces the key in state with own, or with a generated one when own is nil. With
// kubernetes_secret the Secret is rewritten in place with the new key and, under
// keys.SecretKeyPrevious, the one it replaces: an agent watching the Secret picks both up at
// once, signs with whichever the orchestrator accepts, and still recognises the Jobs it sealed
// with the old key.
func (r *keyPairResource) rotate(ctx context.Context, state, plan keyPairModel, own ed25519.PrivateKey) (keyPairModel, diag.Diagnostics) {
	pub, priv, diags := keyOrNew(own)
	if diags.HasError() {
		return keyPairModel{}, diags
	}
	privPEM, err := keys.EncodePrivatePEM(priv)
	if err != nil {
		diags.AddError("Unable to Encode Private Key",
			"The new private key could not be encoded as PKCS#8 PEM. This is always a bug in the provider code and should be reported to the provider developers.\n\nOriginal error: "+err.Error())
		return keyPairModel{}, diags
	}
	next, err := keyPairModelFromPublic(pub)
	if err != nil {
		diags.AddError("Unable to Encode Public Key",
			"The new public key could not be encoded. This is always a bug in the provider code and should be reported to the provider developers.\n\nOriginal error: "+err.Error())
		return keyPairModel{}, diags
	}
	next.Keepers, next.KubernetesSecret = plan.Keepers, plan.KubernetesSecret
	next.PrivateKeyFile, next.OwnPrivateKeyPEM = plan.PrivateKeyFile, plan.OwnPrivateKeyPEM
	if plan.KubernetesSecret == nil {
		next.PrivateKeyPEM = types.StringValue(privPEM)
		return next, diags
	}
	diags.Append(r.rotateSecret(ctx, plan.KubernetesSecret, state.FingerprintSHA256.ValueString(), privPEM, next.FingerprintSHA256.ValueString())...)
	tflog.Info(ctx, "rotated the key pair", map[string]any{"fingerprint_old": state.FingerprintSHA256.ValueString(), "fingerprint": next.FingerprintSHA256.ValueString()})
	return next, diags
}

func (r *keyPairResource) Delete(ctx context.Context, req resource.DeleteRequest, resp *resource.DeleteResponse) {
	var state keyPairModel
	resp.Diagnostics.Append(req.State.Get(ctx, &state)...)
	if resp.Diagnostics.HasError() || state.KubernetesSecret == nil {
		return
	}
	resp.Diagnostics.Append(r.deleteSecret(ctx, state.KubernetesSecret, state.FingerprintSHA256.ValueString())...)
}

// ImportState imports a key pair whose private key lives in a Secret, by "namespace/name". A key
// pair kept in state cannot be imported: its private key exists nowhere else.
func (r *keyPairResource) ImportState(ctx context.Context, req resource.ImportStateRequest, resp *resource.ImportStateResponse) {
	ns, name, ok := strings.Cut(req.ID, "/")
	if !ok || ns == "" || name == "" || strings.Contains(name, "/") {
		resp.Diagnostics.AddError("Invalid Import ID",
			fmt.Sprintf("Expected the Secret holding the private key as \"<namespace>/<name>\", got %q. Only key pairs kept in a Kubernetes Secret can be imported.", req.ID))
		return
	}
	resp.Diagnostics.Append(resp.State.SetAttribute(ctx, path.Root("id"), req.ID)...)
	resp.Diagnostics.Append(resp.State.SetAttribute(ctx, path.Root("kubernetes_secret"), keyPairSecretModel{
		Namespace:       types.StringValue(ns),
		Name:            types.StringValue(name),
		CreateNamespace: types.BoolValue(false),
	})...)
}

// keyPairModelFromPublic fills the public attributes of a key pair.
func keyPairModelFromPublic(pub ed25519.PublicKey) (keyPairModel, error) {
	pubPEM, err := keys.EncodePublicPEM(pub)
	if err != nil {
		return keyPairModel{}, err
	}
	ssh, err := keys.OpenSSH(pub)
	if err != nil {
		return keyPairModel{}, err
	}
	fp := keys.Fingerprint(pub)
	return keyPairModel{
		ID:                types.StringValue(fp),
		Keepers:           types.MapNull(types.StringType),
		PublicKeyPEM:      types.StringValue(pubPEM),
		PublicKeyOpenSSH:  types.StringValue(ssh),
		FingerprintSHA256: types.StringValue(fp),
		PrivateKeyPEM:     types.StringNull(),
	}, nil
}

// blockAddedOrRemoved is true when the kubernetes_secret block appears or disappears: the
// private key then has to move between state and cluster, which needs a new key.
func blockAddedOrRemoved(_ context.Context, req planmodifier.ObjectRequest, resp *objectplanmodifier.RequiresReplaceIfFuncResponse) {
	resp.RequiresReplace = req.StateValue.IsNull() != req.PlanValue.IsNull()
}
