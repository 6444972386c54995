package helm

import (
	"context"
	"fmt"
	"sort"

	"helm.sh/helm/v3/pkg/release"
	"helm.sh/helm/v3/pkg/releaseutil"
	appsv1 "k8s.io/api/apps/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/yaml"
)

// LiveDrift compares the Deployments in a release's manifest with the live objects and returns
// one line per difference in replicas or container images, or a deleted Deployment. Helm's
// upgrade restores all of them (its three-way merge patches live changes back), so a caller that
// sees drift only has to upgrade.
//
// Only Deployments are compared: they are what `kubectl scale` and `kubectl set image` change,
// and checking every field of every object would report the defaults the API server fills in.
func LiveDrift(ctx context.Context, cs kubernetes.Interface, rel *release.Release) ([]string, error) {
	var drift []string
	manifests := releaseutil.SplitManifests(rel.Manifest)
	names := make([]string, 0, len(manifests))
	for name := range manifests {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		doc := manifests[name]
		var meta metav1.TypeMeta
		if err := yaml.Unmarshal([]byte(doc), &meta); err != nil || meta.Kind != "Deployment" {
			continue
		}
		var want appsv1.Deployment
		if err := yaml.Unmarshal([]byte(doc), &want); err != nil {
			return nil, fmt.Errorf("parse Deployment in the manifest of release %q: %w", rel.Name, err)
		}
		ns := want.Namespace
		if ns == "" {
			ns = rel.Namespace
		}
		live, err := cs.AppsV1().Deployments(ns).Get(ctx, want.Name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			drift = append(drift, fmt.Sprintf("Deployment %s/%s was deleted", ns, want.Name))
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("read Deployment %s/%s: %w", ns, want.Name, err)
		}
		if w, l := replicas(want.Spec.Replicas), replicas(live.Spec.Replicas); w != l {
			drift = append(drift, fmt.Sprintf("Deployment %s/%s has %d replicas, the release sets %d", ns, want.Name, l, w))
		}
		liveImages := map[string]string{}
		for _, c := range live.Spec.Template.Spec.Containers {
			liveImages[c.Name] = c.Image
		}
		for _, c := range want.Spec.Template.Spec.Containers {
			if img, ok := liveImages[c.Name]; !ok {
				drift = append(drift, fmt.Sprintf("Deployment %s/%s lost container %q", ns, want.Name, c.Name))
			} else if img != c.Image {
				drift = append(drift, fmt.Sprintf("Deployment %s/%s runs container %q with image %q, the release sets %q", ns, want.Name, c.Name, img, c.Image))
			}
		}
	}
	return drift, nil
}

// replicas is the API server's default of 1 for an unset count.
func replicas(p *int32) int32 {
	if p == nil {
		return 1
	}
	return *p
}
