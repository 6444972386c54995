package jobrun

import (
	"fmt"
	"strings"

	"github.com/outpost-dev/terraform-provider-outpost/internal/api"
)

// uploadOutputs reads the outputs from the new state and uploads them. After an apply these are
// the configuration's outputs; after a destroy they are empty, and uploading the empty set
// records that nothing is deployed any more. A plan changes no state and uploads nothing. The
// values never go to the log: only the CLI's stderr does.
func (j *attemptRun) uploadOutputs(cli, cliPath, configDir string, env []string) int {
	fmt.Fprintf(j.out, "\n==> %s output -json\n", cli)
	var buf strings.Builder
	code, err := runCLI(j.st, cliRun{Path: cliPath, Args: []string{"output", "-json", "-no-color"}, Dir: configDir, Env: env, Stdout: &buf, Stderr: j.out, Log: j.out})
	if err != nil || code != 0 {
		fmt.Fprintf(j.out, "==> error: %s output failed (exit code %d, %v); the outputs were not uploaded\n", cli, code, err)
		return ExitOutputsFailed
	}
	outs, err := parseOutputs([]byte(buf.String()))
	if err != nil {
		fmt.Fprintf(j.out, "==> error: %v; the outputs were not uploaded\n", err)
		return ExitOutputsFailed
	}
	// The apply has run: outputs beyond what the orchestrator keeps are left out, never a reason
	// to fail the deployment. Their names go to the log (never their values).
	outs, omitted := outs.Cap(api.MaxOutputs, api.MaxOutputsBytes)
	if len(omitted) > 0 {
		fmt.Fprintf(j.out, "==> warning: %d outputs left out, beyond the %d outputs or %d MiB of JSON a deployment keeps "+
			"(the deployment's outputs_omitted says so): %s\n", len(omitted), api.MaxOutputs, api.MaxOutputsBytes>>20, namesSample(omitted, 20))
	}
	ctx, cancel := boundedContext(outputsTimeout, j.st)
	defer cancel()
	if err := j.client.PutOutputs(ctx, outs, len(omitted)); err != nil {
		fmt.Fprintf(j.out, "==> error: upload the outputs: %v\n", err)
		return ExitOutputsFailed
	}
	sensitive := 0
	for _, o := range outs {
		if o.Sensitive {
			sensitive++
		}
	}
	fmt.Fprintf(j.out, "uploaded %d outputs (%d sensitive)\n", len(outs), sensitive)
	return 0
}

// namesSample lists up to n names, then how many more there are.
func namesSample(names []string, n int) string {
	if len(names) <= n {
		return strings.Join(names, ", ")
	}
	return fmt.Sprintf("%s and %d more", strings.Join(names[:n], ", "), len(names)-n)
}
