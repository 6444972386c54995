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

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	agentchart "github.com/outpost-dev/terraform-provider-outpost/agent/chart"
	"github.com/outpost-dev/terraform-provider-outpost/internal/image"
	"github.com/outpost-dev/terraform-provider-outpost/internal/image/recipe"
	"github.com/outpost-dev/terraform-provider-outpost/internal/testbed"
)

// imageRegistry is where the chart's default images live; the demo builds them under these very
// names, so the chart installs as it would in any cluster and the node finds them imported.
const imageRegistry = "ghcr.io/outpost-dev"

// builtImage is one image the demo imported into the node.
type builtImage struct {
	ref        string
	index      string    // digest of the image index
	digest     string    // digest of this platform's image manifest
	importedAt time.Time // when the node had it
}

// buildImages builds the outpost-agent and outpost-job images for this machine's platform, as
// `make images` does, and imports them into the test bed's node.
func buildImages(ctx context.Context, c *Config, s *stepper, tc *testbed.Cluster) ([]builtImage, error) {
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
	var imgs []builtImage
	for _, b := range built {
		if err := tc.ImportImage(ctx, b.Archive); err != nil {
			return nil, err
		}
		p := b.Platforms[0]
		s.info("%s (%s, %.1f MiB) imported into node %s", b.Ref, shortDigest(p.Digest), float64(p.Size)/(1<<20), testbed.RealNodeName)
		imgs = append(imgs, builtImage{ref: b.Ref, index: b.Digest, digest: p.Digest, importedAt: time.Now()})
	}
	s.info("built and imported in %s; archives in %s", time.Since(start).Round(100*time.Millisecond), out)
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

// restartStaleAgentPods deletes the agent pods of an earlier run (created before the import) that
// may run an older build of the agent image (same tag), so their Deployment starts them again
// from the image just imported.
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
		if !p.CreationTimestamp.Time.Before(agent.importedAt) {
			continue // started from the image just imported (pull policy IfNotPresent)
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
