package kubernetes

import (
	"errors"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"

	"github.com/outpost-dev/terraform-provider-outpost/agent/internal/jobenv"
	"github.com/outpost-dev/terraform-provider-outpost/internal/podtemplate"
)

// FuzzBuildJob merges any pod template the contract accepts with the agent's overlay and checks
// that no template takes over what the agent owns: one main container running the injected job
// runner with no arguments, the injecting init container first and exactly as built, the
// runner's service account, restartPolicy Never, the owned labels, each owned env var, mount and
// volume exactly once with the agent's value, and the token only in the Secret. A template the
// merge cannot take is refused with a *podtemplate.Error, never another error or a panic.
// Seeds: testdata/fuzz/FuzzBuildJob (the documented shapes and the templates that try to
// override owned fields: env, mounts, volumes, init containers, labels, service account).
func FuzzBuildJob(f *testing.F) {
	f.Add(userTemplate)
	f.Fuzz(func(t *testing.T, tpl string) {
		if _, err := podtemplate.Parse(tpl); err != nil {
			return // refused before the merge; FuzzParse covers the contract itself
		}
		c := claim(tpl)
		job, secret, err := BuildJob(c, "opst_fuzz", opts, time.Unix(1000, 0))
		if err != nil {
			var pe *podtemplate.Error
			if !errors.As(err, &pe) {
				t.Fatalf("BuildJob refused an accepted template with an untyped error %T: %v", err, err)
			}
			return
		}
		checkOwned(t, job.Spec.Template, secret.Name)
		for k, v := range map[string]string{LabelManagedBy: ManagedByValue, LabelRunnerID: "r1", LabelDeploymentID: "dep-123", LabelAttempt: "2"} {
			if job.Labels[k] != v {
				t.Fatalf("Job label %s = %q, want %q", k, job.Labels[k], v)
			}
		}
		if job.Name != JobName(c.DeploymentID, c.Attempt) || *job.Spec.BackoffLimit != 0 {
			t.Fatalf("Job %s backoffLimit %d", job.Name, *job.Spec.BackoffLimit)
		}
		if string(secret.Data[tokenKey]) != c.JobToken || string(secret.Data[stateTokenKey]) != "opst_fuzz" {
			t.Fatalf("token Secret holds %q", secret.Data)
		}
	})
}

// checkOwned checks the agent-owned fields of a built pod template.
func checkOwned(t *testing.T, pod corev1.PodTemplateSpec, tokenSecret string) {
	t.Helper()
	ps := pod.Spec
	if ps.RestartPolicy != corev1.RestartPolicyNever || ps.ServiceAccountName != "deployer" || ps.DeprecatedServiceAccount != "" { //nolint:staticcheck // checked so it cannot disagree
		t.Fatalf("restartPolicy %q serviceAccountName %q serviceAccount %q", ps.RestartPolicy, ps.ServiceAccountName, ps.DeprecatedServiceAccount) //nolint:staticcheck // see above
	}
	for k, v := range map[string]string{LabelManagedBy: ManagedByValue, LabelRunnerID: "r1", LabelDeploymentID: "dep-123", LabelAttempt: "2", "np": "allow-agent"} {
		if pod.Labels[k] != v {
			t.Fatalf("pod label %s = %q, want %q", k, pod.Labels[k], v)
		}
	}
	if ps.TerminationGracePeriodSeconds == nil || *ps.TerminationGracePeriodSeconds < 150 {
		t.Fatalf("terminationGracePeriodSeconds %v, want ≥ 150", ps.TerminationGracePeriodSeconds)
	}
	if len(ps.InitContainers) == 0 || !equalContainer(ps.InitContainers[0], injectContainer(opts.AgentImage)) {
		t.Fatalf("first init container %+v, want the injecting one as built", ps.InitContainers)
	}
	for _, c := range ps.InitContainers[1:] {
		if c.Name == InjectContainer {
			t.Fatal("a second init container named " + InjectContainer)
		}
	}
	var mains []corev1.Container
	for _, c := range ps.Containers {
		if c.Name == podtemplate.MainContainer {
			mains = append(mains, c)
		}
	}
	if len(mains) != 1 {
		t.Fatalf("%d main containers", len(mains))
	}
	m := mains[0]
	if !slices.Equal(m.Command, JobCommand) || len(m.Args) != 0 || m.Image == "" {
		t.Fatalf("main runs %q %q in image %q", m.Command, m.Args, m.Image)
	}
	env := map[string][]string{}
	for _, e := range m.Env {
		env[e.Name] = append(env[e.Name], e.Value)
		if e.Value == "opj_secret" || (e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil && e.ValueFrom.SecretKeyRef.Name == tokenSecret) {
			t.Fatalf("the job token reaches main's env %s", e.Name)
		}
	}
	want := map[string]string{jobenv.APIURL: opts.APIURL, jobenv.TokenFile: tokenMountPath + "/" + tokenKey, jobenv.CLI: opts.CLI,
		jobenv.StateURL: opts.StateURL, jobenv.InsecureAllowHTTP: "false", jobenv.Image: m.Image}
	for k, v := range want {
		if got := env[k]; len(got) != 1 || got[0] != v {
			t.Fatalf("main env %s = %q, want exactly [%q]", k, got, v)
		}
	}
	mounts := map[string]int{}
	for _, vm := range m.VolumeMounts {
		mounts[vm.Name]++
		if (vm.MountPath == tokenMountPath && vm.Name != tokenVolume) || (vm.MountPath == runnerMountPath && vm.Name != runnerVolume) {
			t.Fatalf("main mounts %s at the owned path %s", vm.Name, vm.MountPath)
		}
	}
	if mounts[tokenVolume] != 1 || mounts[runnerVolume] != 1 {
		t.Fatalf("main mounts %v, want the token and runner volumes once each", mounts)
	}
	vols := map[string][]corev1.Volume{}
	for _, v := range ps.Volumes {
		vols[v.Name] = append(vols[v.Name], v)
	}
	if tv := vols[tokenVolume]; len(tv) != 1 || tv[0].Secret == nil || tv[0].Secret.SecretName != tokenSecret || volumeType(&tv[0].VolumeSource) != "secret" {
		t.Fatalf("token volume %+v", tv)
	}
	if rv := vols[runnerVolume]; len(rv) != 1 || rv[0].EmptyDir == nil || volumeType(&rv[0].VolumeSource) != "emptyDir" {
		t.Fatalf("runner volume %+v", rv)
	}
}

func equalContainer(a, b corev1.Container) bool {
	return equality.Semantic.DeepEqual(a, b)
}
