package demo

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/outpost-dev/terraform-provider-outpost/internal/api"
)

// nameLimits are the rules of every name modules/kubernetes-agent-runner/modules/names derives,
// as the cloud providers' documentation states them (aws 6.x, google 7.x, azurerm 4.x).
var nameLimits = map[string]struct {
	max   int
	valid *regexp.Regexp
}{
	"state_storage_id":                {63, regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`)},
	"aws_role_name":                   {64, regexp.MustCompile(`^[\w+=,.@-]+$`)},
	"gcp_service_account_id":          {30, regexp.MustCompile(`^[a-z][-a-z0-9]{4,28}[a-z0-9]$`)},
	"azure_identity_name":             {128, regexp.MustCompile(`^[a-zA-Z0-9][a-zA-Z0-9_-]{2,127}$`)},
	"azure_federated_credential_name": {120, regexp.MustCompile(`^[a-zA-Z0-9][a-zA-Z0-9_-]{2,119}$`)},
}

// boundaryRunnerIDs are valid runner ids of every length from 1 to 63, in families that share
// long beginnings (so a cut without a hash would collide), with '-' where a cut may land.
func boundaryRunnerIDs() []string {
	var ids []string
	shared := "kubernetes-agent-arn-aws-eks-eu-west-1-123456789012-cluster-prod"
	for n := 1; n <= 63; n++ {
		ids = append(ids, strings.Repeat("x", n), strings.TrimRight(strings.Repeat("a-", 32)[:n], "-")+"z")
		if n <= 62 {
			ids = append(ids, strings.Trim(shared[:n], "-")+"9")
		}
	}
	seen := map[string]bool{}
	var out []string
	for _, id := range ids {
		if len(id) <= 63 && !seen[id] {
			seen[id] = true
			out = append(out, id)
		}
	}
	return out
}

// TestRunnerNames evaluates the names module with the real CLI (both CLIs when OUTPOST_TOFU is
// set) for boundary runner ids: every name must fit its limit and rules, no two runner ids may
// share a name, and invalid runner ids must be refused with a message that says what to do.
func TestRunnerNames(t *testing.T) {
	clis := map[string]string{}
	if tf, err := exec.LookPath("terraform"); err == nil {
		clis["terraform"] = tf
	} else {
		t.Skip("no terraform binary on PATH")
	}
	if tofu := os.Getenv("OUTPOST_TOFU"); tofu != "" {
		clis["tofu"] = tofu
	}
	module := filepath.Join(repoRoot(t), "modules", "kubernetes-agent-runner", "modules", "names")
	ids := boundaryRunnerIDs()
	for name, cli := range clis {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			rel, err := filepath.Rel(dir, module)
			if err != nil {
				t.Fatal(err)
			}
			root := fmt.Sprintf(`
variable "ids" {
  type = list(string)
}

module "n" {
  for_each  = toset(var.ids)
  source    = %q
  runner_id = each.value
}

output "names" {
  value = module.n
}
`, rel)
			if err := os.WriteFile(filepath.Join(dir, "main.tf"), []byte(root), 0o644); err != nil {
				t.Fatal(err)
			}
			run := func(ids []string, args ...string) (string, error) {
				vars, _ := json.Marshal(map[string]any{"ids": ids})
				if err := os.WriteFile(filepath.Join(dir, "terraform.tfvars.json"), vars, 0o644); err != nil {
					t.Fatal(err)
				}
				cmd := exec.CommandContext(t.Context(), cli, args...)
				cmd.Dir = dir
				cmd.Env = append(os.Environ(), "TF_CLI_CONFIG_FILE="+os.DevNull, "TF_IN_AUTOMATION=1")
				out, err := cmd.CombinedOutput()
				return string(out), err
			}
			if out, err := run(ids, "init", "-no-color", "-input=false"); err != nil {
				t.Fatalf("init: %v\n%s", err, out)
			}
			if out, err := run(ids, "apply", "-auto-approve", "-no-color", "-input=false"); err != nil {
				t.Fatalf("apply: %v\n%s", err, out)
			}
			out, err := run(ids, "output", "-json", "names")
			if err != nil {
				t.Fatalf("output: %v\n%s", err, out)
			}
			var got map[string]map[string]string
			if err := json.Unmarshal([]byte(out), &got); err != nil {
				t.Fatalf("output -json: %v\n%s", err, out)
			}
			checkRunnerNames(t, ids, got)

			for _, bad := range []string{strings.Repeat("x", 64), "Prod", "-prod", "prod-", "arn:aws:eks:eu-west-1:123456789012:cluster/prod", ""} {
				out, err := run([]string{bad}, "plan", "-no-color", "-input=false")
				if err == nil || !strings.Contains(strings.Join(strings.Fields(out), " "), "is not a valid runner id") ||
					!strings.Contains(out, "provider::outpost::runner_id") {
					t.Errorf("runner id %q: want a refusal naming provider::outpost::runner_id, got %v:\n%s", bad, err, out)
				}
			}
		})
	}
}

func checkRunnerNames(t *testing.T, ids []string, got map[string]map[string]string) {
	t.Helper()
	if len(got) != len(ids) {
		t.Fatalf("names for %d runner ids, want %d", len(got), len(ids))
	}
	owner := map[string]string{} // kind/name => runner id
	for _, id := range ids {
		names, ok := got[id]
		if !ok {
			t.Fatalf("no names for runner id %q", id)
		}
		if names["runner_id"] != id {
			t.Errorf("runner_id output %q, want %q", names["runner_id"], id)
		}
		for kind, limit := range nameLimits {
			n, ok := names[kind]
			if !ok {
				t.Fatalf("the names module has no output %s", kind)
			}
			if len(n) > limit.max || !limit.valid.MatchString(n) {
				t.Errorf("%s for runner id %q (%d characters) is %q (%d characters): over %d or against %s",
					kind, id, len(id), n, len(n), limit.max, limit.valid)
			}
			if other, dup := owner[kind+"/"+n]; dup {
				t.Errorf("runner ids %q and %q share the %s %q", other, id, kind, n)
			}
			owner[kind+"/"+n] = id
		}
		if err := api.ValidateID("state_storage_id", names["state_storage_id"]); err != nil {
			t.Errorf("state storage id of %q: %v", id, err)
		}
		// A name that fits keeps the runner id whole.
		if len(id) <= 52 && names["aws_role_name"] != "outpost-"+id+"-job" {
			t.Errorf("aws_role_name of %q is %q, want it unshortened", id, names["aws_role_name"])
		}
	}
}
