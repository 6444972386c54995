package provider

import (
	"context"
	"fmt"

	"github.com/hashicorp/terraform-plugin-framework/function"

	"github.com/outpost-dev/terraform-provider-outpost/internal/api"
)

// Ensure the implementation satisfies the framework interface.
var _ function.Function = runnerIDFunction{}

// NewRunnerIDFunction returns provider::outpost::runner_id.
func NewRunnerIDFunction() function.Function { return runnerIDFunction{} }

// runnerIDFunction makes a valid runner id out of a name that is not one, such as a kube context
// name, with api.DeriveID: the same derivation the runner id validator suggests.
type runnerIDFunction struct{}

func (runnerIDFunction) Metadata(_ context.Context, _ function.MetadataRequest, resp *function.MetadataResponse) {
	resp.Name = "runner_id"
}

func (runnerIDFunction) Definition(_ context.Context, _ function.DefinitionRequest, resp *function.DefinitionResponse) {
	resp.Definition = function.Definition{
		Summary: "Makes a valid runner id out of any name, such as a kube context name",
		MarkdownDescription: "Makes a valid runner id (a DNS-1123 label: lower-case letters, digits and `-`, at most 63 " +
			"characters) out of a name that is not one, such as a kube context name " +
			"(`arn:aws:eks:eu-west-1:123456789012:cluster/prod`, `gke_my-project_europe-west1_prod`). The same name " +
			"always gives the same id, in every release of the provider.\n\n" +
			"Letters are lower-cased; every run of other characters than `a`-`z` and `0`-`9` becomes one `-`, and `-` at " +
			"either end is dropped. A result longer than 63 characters keeps at most its first 24 and its last 29 characters " +
			"(cut back to whole words between `-`) around the first 8 hex digits of the SHA-256 of the whole name, so long " +
			"names that share a beginning or an end still get different ids. Names that differ only in the characters " +
			"replaced by `-` (`a_b` and `a.b`) give the same id. A name without a letter or digit is an error.\n\n" +
			"Provider functions need Terraform 1.8 or OpenTofu 1.7 or newer.",
		Parameters: []function.Parameter{
			function.StringParameter{
				Name:                "name",
				MarkdownDescription: "Any name, e.g. `\"kubernetes-agent-${local.kubeconfig_context}\"`.",
			},
		},
		Return: function.StringReturn{},
	}
}

func (runnerIDFunction) Run(ctx context.Context, req function.RunRequest, resp *function.RunResponse) {
	var name string
	resp.Error = function.ConcatFuncErrors(resp.Error, req.Arguments.Get(ctx, &name))
	if resp.Error != nil {
		return
	}
	id, err := api.DeriveID(name)
	if err != nil {
		resp.Error = function.NewArgumentFuncError(0, fmt.Sprintf("Cannot make a runner id: %s. Give a name with at least one letter or digit.", messageOf(err)))
		return
	}
	resp.Error = function.ConcatFuncErrors(resp.Error, resp.Result.Set(ctx, id))
}
