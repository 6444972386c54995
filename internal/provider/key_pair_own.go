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
// plan; a different key in the file rotates the key pair in place, as a change of keepers does.

// ownKeyAttributes are the attributes that bring an existing private key.
func ownKeyAttributes() map[string]schema.Attribute {
	needsSecret := stringvalidator.AlsoRequires(path.MatchRoot("kubernetes_secret"))
	return map[string]schema.Attribute{
		"private_key_file": schema.StringAttribute{
			MarkdownDescription: "Bring your own key: the path of an ed25519 private key in PEM form (PKCS#8, as `openssl genpkey " +
				"-algorithm ed25519` writes it), relative to the directory Terraform runs in. The provider reads it at plan and apply " +
				"and writes it into the `kubernetes_secret` block's Secret (required with it); only the path enters the state. " +
				"Another key in the file rotates the key pair in place (the replaced key kept in the Secret, as with `keepers`).",
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

// planOwnKey plans the public attributes of a key brought in. Another key than the one in state
// is a rotation in place (Update), as a change of keepers is.
func planOwnKey(ctx context.Context, plan keyPairModel, resp *resource.ModifyPlanResponse) {
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
	plan.ID, plan.PublicKeyPEM, plan.PublicKeyOpenSSH, plan.FingerprintSHA256 = planned.ID, planned.PublicKeyPEM, planned.PublicKeyOpenSSH, planned.FingerprintSHA256
	plan.PrivateKeyPEM = types.StringNull()
	resp.Diagnostics.Append(resp.Plan.Set(ctx, plan)...)
}

// sameKey reports whether priv is the key the state holds.
func sameKey(priv ed25519.PrivateKey, state keyPairModel) bool {
	pub, ok := priv.Public().(ed25519.PublicKey)
	return ok && keys.Fingerprint(pub) == state.FingerprintSHA256.ValueString()
}

// keyOrNew returns own with its public half, or a new key pair when own is nil.
func keyOrNew(own ed25519.PrivateKey) (ed25519.PublicKey, ed25519.PrivateKey, diag.Diagnostics) {
	var diags diag.Diagnostics
	if own != nil {
		pub, _ := own.Public().(ed25519.PublicKey)
		return pub, own, diags
	}
	pub, priv, err := keys.Generate()
	if err != nil {
		diags.AddError("Unable to Generate Key Pair",
			"The system's random source failed while generating an ed25519 key. Retry the apply.\n\nOriginal error: "+err.Error())
	}
	return pub, priv, diags
}
