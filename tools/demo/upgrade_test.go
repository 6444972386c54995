package demo

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/outpost-dev/terraform-provider-outpost/internal/api"
	"github.com/outpost-dev/terraform-provider-outpost/internal/orchestrator/orchestratortest"
	"github.com/outpost-dev/terraform-provider-outpost/internal/release/releasetest"
	"github.com/outpost-dev/terraform-provider-outpost/tools/ocitest"
	"github.com/outpost-dev/terraform-provider-outpost/tools/release"
)

// testProviderUpgradeOnPods upgrades an installation from the previous build (PREVIOUS_COMMIT in
// scripts/versions.env) to this tree the way a user does, with deployments in flight: the
// previous provider applies the previous build's quickstart (its chart, its agent image), then
// this tree's provider applies this tree's quickstart over the same state, which upgrades the
// chart and rolls the agent pods while applies run in job pods. Every deployment must succeed in
// its first attempt with its events and its log.
func testProviderUpgradeOnPods(t *testing.T, c Config) {
	ctx := t.Context()
	c.Defaults()
	e := attachPods(ctx, t, c)
	prev := releasetest.PreviousForTest(t, c.Repo)
	cli, err := c.cliPath()
	if err != nil {
		t.Fatal(err)
	}
	const runnerID, ns = "upgrade", "outpost-upgrade"
	reg := e.tc.Registry

	// The previous build's images, in the test bed's registry where the quickstart's
	// image_registry points, and a login the previous provider cannot write itself.
	built, err := release.ReadSummary(prev.ImagesDir())
	if err != nil {
		t.Fatal(err)
	}
	opts, err := ocitest.RemoteOptions(ctx, reg)
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range built {
		a, err := release.OpenOCIArchive(b.Archive)
		if err != nil {
			t.Fatal(err)
		}
		ref, err := name.NewTag(reg.Host + "/outpost-dev/" + b.Name + ":" + prev.Version)
		if err == nil {
			err = remote.WriteIndex(ref, a.Index, opts...)
		}
		a.Close()
		if err != nil {
			t.Fatalf("pushing the previous build's %s: %v", b.Name, err)
		}
	}
	for _, n := range []string{ns, ns + "-jobs"} {
		if _, err := e.kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: n}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
		s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "previous-login", Namespace: n}, Type: corev1.SecretTypeDockerConfigJson,
			Data: map[string][]byte{corev1.DockerConfigJsonKey: reg.DockerConfigJSON(reg.Username, reg.Password)}}
		if _, err := e.kube.CoreV1().Secrets(n).Create(ctx, s, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
	}

	dir := t.TempDir()
	prevRC := filepath.Join(t.TempDir(), "previous.tfrc")
	if err := os.WriteFile(prevRC, fmt.Appendf(nil, `provider_installation {
  dev_overrides {
    "registry.terraform.io/outpost-dev/outpost" = %q
    "registry.opentofu.org/outpost-dev/outpost" = %q
  }
  direct {}
}
`, filepath.Dir(prev.Bin("terraform-provider-outpost")), filepath.Dir(prev.Bin("terraform-provider-outpost"))), 0o644); err != nil {
		t.Fatal(err)
	}
	curRC, err := writeCLIConfig(&c)
	if err != nil {
		t.Fatal(err)
	}
	apply := func(rc string, vars ...string) (time.Duration, error) {
		cmd := exec.CommandContext(ctx, cli, "apply", "-auto-approve", "-input=false", "-no-color")
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "TF_CLI_CONFIG_FILE="+rc, "TF_IN_AUTOMATION=1", "OUTPOST_API_URL="+e.apiURL, "OUTPOST_ORG_ID="+c.Org,
			"OUTPOST_TOKEN="+e.token, "KUBE_CONFIG_PATH="+e.tc.Kubeconfig, insecureHTTPEnv+"=true",
			"TF_VAR_runner_id="+runnerID, "TF_VAR_agent_namespace="+ns, "TF_VAR_job_namespace="+ns+"-jobs", "TF_VAR_state_namespace="+ns+"-state")
		cmd.Env = append(cmd.Env, vars...)
		start := time.Now()
		out, err := cmd.CombinedOutput()
		if err != nil {
			return 0, fmt.Errorf("%s apply: %w\n%s", c.CLI, err, out)
		}
		return time.Since(start), nil
	}

	if err := copyTF(prev.QuickstartDir(), dir); err != nil {
		t.Fatal(err)
	}
	if _, err := apply(prevRC, "TF_VAR_agent_values="+fmt.Sprintf("insecureAllowHttp: true\nglobal: {imageRegistry: %q}\nimagePullSecrets: [previous-login]", reg.Host)); err != nil {
		t.Fatalf("the previous build's quickstart with its provider: %v", err)
	}
	if r, err := e.admin.GetRunner(ctx, runnerID); err != nil || r.Status.AgentVersion != prev.Version {
		t.Fatalf("runner %s after the previous install: %+v (%v), want its agent %s connected", runnerID, r, err, prev.Version)
	}

	// Work in flight: applies that hold their job pods for a while, and plans.
	var ids []string
	for n := range 6 {
		for _, op := range []api.Operation{api.OperationApply, api.OperationPlan} {
			d, err := e.admin.CreateDeployment(ctx, api.DeploymentInput{RunnerID: runnerID, Operation: op,
				Variables: map[string]json.RawMessage{"n": json.RawMessage(fmt.Sprintf(`"%d"`, n))}, StateKey: fmt.Sprintf("upgrade/%d", n),
				Source: api.Source{Inline: &api.InlineSource{ArchiveTarGz: orchestratortest.TarGz(t, slowApply)}}})
			if err != nil {
				t.Fatal(err)
			}
			ids = append(ids, d.ID)
		}
	}
	deadline := time.Now().Add(3 * time.Minute)
	for running := 0; running == 0; {
		if time.Now().After(deadline) {
			t.Fatal("no deployment started on the previous agent within 3 min")
		}
		time.Sleep(200 * time.Millisecond)
		for _, id := range ids {
			if d, err := e.admin.GetDeployment(ctx, id); err == nil && d.Status == api.StatusRunning {
				running++
			}
		}
	}

	// The upgrade: this tree's provider and quickstart over the same state.
	if err := copyTF(filepath.Join(c.Repo, "examples", "quickstart"), dir); err != nil {
		t.Fatal(err)
	}
	took, err := apply(curRC, "TF_VAR_agent_values=insecureAllowHttp: true", "TF_VAR_image_registry="+reg.Host,
		"TF_VAR_image_pull_secret_name="+pullSecretName,
		"TF_VAR_image_pull_secret_docker_config_json="+string(reg.DockerConfigJSON(reg.Username, reg.Password)))
	if err != nil {
		t.Fatalf("this tree's quickstart with its provider: %v", err)
	}
	r, err := e.admin.GetRunner(ctx, runnerID)
	if err != nil || r.Status.AgentVersion == prev.Version {
		t.Fatalf("runner %s after the upgrade: agent %q (%v), want this tree's", runnerID, r.Status.AgentVersion, err)
	}

	var lost, twice, eventsLost int
	for _, id := range ids {
		var d *api.Deployment
		for wait := time.Now().Add(6 * time.Minute); ; {
			if d, err = e.admin.GetDeployment(context.Background(), id); err != nil {
				t.Fatal(err)
			}
			if d.Status.Terminal() || time.Now().After(wait) {
				break
			}
			time.Sleep(250 * time.Millisecond)
		}
		if d.Status != api.StatusSucceeded {
			lost++
			chunk, _ := e.admin.GetLogs(ctx, id, 0, 1<<20)
			t.Errorf("deployment %s (%s) across the upgrade: %s (%s: %s)\n%s", id, d.Operation, d.Status, d.Reason, d.Message, chunk.Data)
		}
		if d.Attempt != 1 {
			twice++
			t.Errorf("deployment %s ran %d attempts", id, d.Attempt)
		}
		evs, err := e.admin.ListEvents(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		counts := orchestratortest.EventCounts(evs)
		chunk, err := e.admin.GetLogs(ctx, id, 0, 1<<20)
		if err != nil || counts[api.EventStarted] != 1 || counts[api.EventFinished] != 1 || !chunk.Complete {
			eventsLost++
			t.Errorf("deployment %s: %d started and %d finished events, log complete %v (%v)", id, counts[api.EventStarted], counts[api.EventFinished], chunk.Complete, err)
		}
	}
	t.Logf("provider upgrade %s → %s (agent %s) with %d deployments in flight: the apply took %s (it waits for the new agent to connect); %d lost, %d run twice, %d with events lost",
		prev.Version, "this tree", r.Status.AgentVersion, len(ids), took.Round(100*time.Millisecond), lost, twice, eventsLost)
}
