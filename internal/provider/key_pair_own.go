package provider

import (
	"context"
	"crypto/ed25519"
	"fmt"
	"os"

	"github.com/hashicorp/terraform-plugin-framework-validators/stringvalidator"
	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/resource"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema"
	"github.com/hashicorp/terraform-plugin-framework/schema/validator"
	"github.com/hashicorp/terraform-plugin-framework/types"

	"github.com/outpost-dev/terraform-provider-outpost/internal/keys"
)

// Bring your own key: outpost_key_pair takes an existing private key (a PEM file the provider
// reads, or PEM text) instead of generating one, and writes it into its Secret. The key pair's
// public attributes come from that key at plan time, so a runner can register it in the same
// plan; a different key in the file replaces the key pair (and rewrites the Secret).

var _ resource.ResourceWithModifyPlan = (*keyPairResource)(nil)

// ownKeyAttributes are the attributes that bring an existing private key.
func ownKeyAttributes() map[string]schema.Attribute {
	needsSecret := stringvalidator.AlsoRequires(path.MatchRoot("kubernetes_secret"))
	return map[string]schema.Attribute{
		"private_key_file": schema.StringAttribute{
			MarkdownDescription: "Bring your own key: the path of an ed25519 private key in PEM form (PKCS#8, as `openssl genpkey " +
				"-algorithm ed25519` writes it), relative to the directory Terraform runs in. The provider reads it at plan and apply " +
				"and writes it into the `kubernetes_secret` block's Secret (required with it); only the path enters the state. " +
				"A different key in the file replaces the key pair.",
			Optional: true,
			Validators: []validator.String{stringvalidator.LengthAtLeast(1), needsSecret,
				stringvalidator.ConflictsWith(path.MatchRoot("own_private_key_pem"))},
		},
		"own_private_key_pem": schema.StringAttribute{
			MarkdownDescription: "Bring your own key as PEM text (e.g. from a secret manager), written into the `kubernetes_secret` " +
				"block's Secret (required with it). Unlike `private_key_file`, the text is kept in the state, as a sensitive value.",
			Optional:   true,
			Sensitive:  true,
			Validators: []validator.String{ownPrivateKeyValidator(), needsSecret},
		},
	}
}

func ownPrivateKeyValidator() validator.String {
	return stringCheck{summary: "Invalid Private Key", description: "must be an ed25519 private key in PEM form", check: func(s string) error {
		_, err := keys.ParsePrivatePEM([]byte(s))
		return err
	}}
}

// ownKey returns the private key the model brings (nil when it brings none, or it is not known
// yet).
func (m keyPairModel) ownKey() (ed25519.PrivateKey, diag.Diagnostics) {
	var diags diag.Diagnostics
	switch {
	case !m.PrivateKeyFile.IsNull() && !m.PrivateKeyFile.IsUnknown():
		name := m.PrivateKeyFile.ValueString()
		b, err := os.ReadFile(name)
		if err != nil {
			diags.AddAttributeError(path.Root("private_key_file"), "Unable to Read Private Key File",
				fmt.Sprintf("The private key file %q could not be read. Check the path: a relative one is relative to the directory "+
					"Terraform runs in.\n\nOriginal error: %s", name, err))
			return nil, diags
		}
		priv, err := keys.ParsePrivatePEM(b)
		if err != nil {
			diags.AddAttributeError(path.Root("private_key_file"), "Invalid Private Key",
				fmt.Sprintf("%s holds no usable ed25519 private key. Make one with `openssl genpkey -algorithm ed25519 -out %s`.\n\nOriginal error: %s", name, name, err))
			return nil, diags
		}
		return priv, diags
	case !m.OwnPrivateKeyPEM.IsNull() && !m.OwnPrivateKeyPEM.IsUnknown():
		priv, err := keys.ParsePrivatePEM([]byte(m.OwnPrivateKeyPEM.ValueString()))
		if err != nil {
			diags.AddAttributeError(path.Root("own_private_key_pem"), "Invalid Private Key", err.Error())
		}
		return priv, diags
	}
	return nil, diags
}

// bringsKey reports whether the model brings its own key (known or not yet).
func (m keyPairModel) bringsKey() bool {
	return !m.PrivateKeyFile.IsNull() || !m.OwnPrivateKeyPEM.IsNull()
}

// ModifyPlan plans the public attributes of a key brought in, and a replacement when it is
// another key than the one in state.
func (r *keyPairResource) ModifyPlan(ctx context.Context, req resource.ModifyPlanRequest, resp *resource.ModifyPlanResponse) {
	if req.Plan.Raw.IsNull() {
		return
	}
	var plan keyPairModel
	resp.Diagnostics.Append(req.Plan.Get(ctx, &plan)...)
	if resp.Diagnostics.HasError() || !plan.bringsKey() {
		return
	}
	priv, diags := plan.ownKey()
	resp.Diagnostics.Append(diags...)
	if resp.Diagnostics.HasError() || priv == nil {
		return
	}
	pub, _ := priv.Public().(ed25519.PublicKey)
	planned, err := keyPairModelFromPublic(pub)
	if err != nil {
		resp.Diagnostics.AddError("Unable to Encode Public Key", "This is always a bug in the provider code and should be reported to the provider developers.\n\nOriginal error: "+err.Error())
		return
	}
	if !req.State.Raw.IsNull() {
		var state keyPairModel
		resp.Diagnostics.Append(req.State.Get(ctx, &state)...)
		if resp.Diagnostics.HasError() {
			return
		}
		if state.FingerprintSHA256.ValueString() != planned.FingerprintSHA256.ValueString() {
			resp.RequiresReplace = append(resp.RequiresReplace, path.Root("private_key_file"), path.Root("own_private_key_pem"))
		}
	}
	plan.ID, plan.PublicKeyPEM, plan.PublicKeyOpenSSH, plan.FingerprintSHA256 = planned.ID, planned.PublicKeyPEM, planned.PublicKeyOpenSSH, planned.FingerprintSHA256
	plan.PrivateKeyPEM = types.StringNull()
	resp.Diagnostics.Append(resp.Plan.Set(ctx, plan)...)
}
