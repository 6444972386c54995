package demo

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	agentchart "github.com/outpost-dev/terraform-provider-outpost/agent/chart"
	"github.com/outpost-dev/terraform-provider-outpost/internal/testbed"
	"github.com/outpost-dev/terraform-provider-outpost/tools/image"
	"github.com/outpost-dev/terraform-provider-outpost/tools/image/recipe"
	"github.com/outpost-dev/terraform-provider-outpost/tools/ocitest"
)

// imageRegistry is where the chart's default images live; the demo builds them under these very
// names and pushes them into the test bed's registry under the same path, so the quickstart
// installs the chart as from any private mirror: global.imageRegistry names the registry's host.
const imageRegistry = "ghcr.io/outpost-dev"

// builtImage is one image the demo pushed into the test bed's registry.
type builtImage struct {
	ref      string    // as the chart names it, in the test bed's registry
	index    string    // digest of the image index
	digest   string    // digest of this platform's image manifest
	pushedAt time.Time // when the registry had it
}

// pullSecretName is the image pull Secret the quickstart has the provider write.
const pullSecretName = "outpost-registry"

// buildImages builds the outpost-agent and outpost-job images for this machine's platform, as
// `make images` does, pushes them into the test bed's registry, and removes earlier builds of the
// same tags from the node, so its next pods pull these.
func buildImages(ctx context.Context, c *Config, s *stepper, tc *testbed.Cluster) ([]builtImage, error) {
	if tc.Registry == nil {
		return nil, fmt.Errorf("%w: the running test bed has no image registry (an older build started it); stop it with `make demo-down` and run `make demo` again", errPrereq)
	}
	tofuVersion, err := recipe.VersionsEnv(c.Repo, "TOFU_VERSION")
	if err != nil {
		return nil, err
	}
	facts, err := recipe.DescribeSource(ctx, c.Repo, os.Getenv)
	if err != nil {
		return nil, err
	}
	platform, err := image.ParsePlatform("linux/" + runtime.GOARCH)
	if err != nil {
		return nil, err
	}
	out := filepath.Join(c.Dir, "images")
	start := time.Now()
	built, err := recipe.Build(ctx, recipe.Options{
		ModuleRoot: c.Repo, Registry: imageRegistry, Version: agentchart.AppVersion, Revision: facts.Revision,
		Created: facts.Created, Licenses: facts.Licenses, TofuVersion: tofuVersion, Platforms: []image.Platform{platform},
		CacheDir: recipe.CacheDir(os.Getenv), OutDir: out, Log: &prefixWriter{out: c.Out, prefix: "    | "},
	})
	if err != nil {
		return nil, fmt.Errorf("build the images (`make images` builds them alone, with the same messages): %w", err)
	}
	opts, err := ocitest.RemoteOptions(ctx, tc.Registry)
	if err != nil {
		return nil, err
	}
	var imgs []builtImage
	for _, b := range built {
		ref, err := name.NewTag(tc.Registry.Host + strings.TrimPrefix(b.Ref, "ghcr.io"))
		if err != nil {
			return nil, err
		}
		if err := remote.WriteIndex(ref, b.Index(), opts...); err != nil {
			return nil, fmt.Errorf("push %s to the test bed's registry: %w", ref, err)
		}
		if err := tc.RemoveImage(ctx, ref.String()); err != nil {
			return nil, err
		}
		p := b.Platforms[0]
		s.info("%s (%s, %.1f MiB) pushed to the test bed's registry", ref, shortDigest(p.Digest), float64(p.Size)/(1<<20))
		imgs = append(imgs, builtImage{ref: ref.String(), index: b.Digest, digest: p.Digest, pushedAt: time.Now()})
	}
	s.info("built and pushed in %s; archives in %s; node %s pulls them with the login in Secret %s", time.Since(start).Round(100*time.Millisecond),
		out, testbed.RealNodeName, pullSecretName)
	return imgs, nil
}

func shortDigest(d string) string {
	if i := strings.IndexByte(d, ':'); i >= 0 && len(d) > i+13 {
		return d[:i+13]
	}
	return d
}

// agentPodSelector selects the chart's agent pods.
const agentPodSelector = "app.kubernetes.io/component=agent"

// restartStaleAgentPods deletes the agent pods of an earlier run (created before the push) that
// may run an older build of the agent image (same tag), so their Deployment starts them again
// from the image just pushed.
func restartStaleAgentPods(ctx context.Context, kc kubernetes.Interface, ns string, imgs []builtImage, s *stepper) error {
	var agent builtImage
	for _, i := range imgs {
		if strings.Contains(i.ref, "/"+recipe.AgentName+":") {
			agent = i
		}
	}
	pods, err := kc.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: agentPodSelector})
	if err != nil {
		return fmt.Errorf("list the agent pods: %w", err)
	}
	for _, p := range pods.Items {
		if !p.CreationTimestamp.Time.Before(agent.pushedAt) {
			continue // pulled the image just pushed (buildImages removed the node's older copy)
		}
		for _, cs := range p.Status.ContainerStatuses {
			if !strings.HasSuffix(cs.ImageID, agent.digest) && !strings.HasSuffix(cs.ImageID, agent.index) {
				s.info("restarting agent pod %s: it runs %s, an earlier build", p.Name, shortDigest(cs.ImageID[strings.LastIndexByte(cs.ImageID, '@')+1:]))
				if err := kc.CoreV1().Pods(ns).Delete(ctx, p.Name, metav1.DeleteOptions{}); err != nil {
					return fmt.Errorf("delete agent pod %s: %w", p.Name, err)
				}
				break
			}
		}
	}
	return nil
}

// printAgentPods shows the chart's agent pods: where they run and from which image.
func printAgentPods(ctx context.Context, kc kubernetes.Interface, ns string, s *stepper) error {
	pods, err := kc.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: agentPodSelector})
	if err != nil {
		return fmt.Errorf("list the agent pods: %w", err)
	}
	for _, p := range pods.Items {
		if p.DeletionTimestamp != nil {
			continue
		}
		img := ""
		if len(p.Spec.Containers) > 0 {
			img = p.Spec.Containers[0].Image
		}
		s.info("agent pod %s/%s: %s on node %s, image %s", ns, p.Name, p.Status.Phase, p.Spec.NodeName, img)
	}
	return nil
}

// jobPod is what the demo saw of a deployment's job pod.
type jobPod struct {
	namespace, name, node, image string
}

// jobPodWatcher records the job pods of one deployment while it runs: the agent deletes the Job
// and its pod once the deployment has finished, so they must be seen while they exist.
type jobPodWatcher struct {
	mu   sync.Mutex
	pods []jobPod
	stop context.CancelFunc
	done chan struct{}
}

// watchJobPods polls the job namespace for the pods of deployment id until stopped.
func watchJobPods(ctx context.Context, kc kubernetes.Interface, ns, id string) *jobPodWatcher {
	ctx, cancel := context.WithCancel(ctx)
	w := &jobPodWatcher{stop: cancel, done: make(chan struct{})}
	go func() {
		defer close(w.done)
		seen := map[string]bool{}
		for {
			list, err := kc.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: deploymentLabel + "=" + id})
			if err == nil {
				for _, p := range list.Items {
					if p.Spec.NodeName == "" || seen[p.Name] {
						continue
					}
					seen[p.Name] = true
					w.mu.Lock()
					w.pods = append(w.pods, jobPod{namespace: ns, name: p.Name, node: p.Spec.NodeName, image: mainImage(p.Spec)})
					w.mu.Unlock()
				}
			}
			select {
			case <-ctx.Done():
				return
			case <-time.After(250 * time.Millisecond):
			}
		}
	}()
	return w
}

// deploymentLabel is the label the agent puts on a deployment's Job and pod.
const deploymentLabel = "outpost.dev/deployment-id"

// Stop ends the watch and returns the pods seen.
func (w *jobPodWatcher) Stop() []jobPod {
	w.stop()
	<-w.done
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.pods
}

func mainImage(spec corev1.PodSpec) string {
	for _, c := range spec.Containers {
		if c.Name == "main" {
			return c.Image
		}
	}
	return ""
}
