package kubernetes

import (
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
)

// imagePullHint says what to do about an image a job pod could not get, from the container
// runtime's error (msg, as the kubelet reports it in the container's waiting state or its Failed
// event): a registry that refused the login or wants one names the pod's pull secrets and where
// to set them; an untrusted certificate, the nodes' CA configuration; anything else, the image name
// and the node's access to the registry.
func imagePullHint(p *corev1.Pod, image, msg string) string {
	lower := strings.ToLower(msg)
	host := registryHost(image)
	switch {
	case strings.Contains(lower, "401 unauthorized") || strings.Contains(lower, "403 forbidden") ||
		strings.Contains(lower, "unauthorized") || strings.Contains(lower, "authentication required") ||
		strings.Contains(lower, "access denied") || strings.Contains(lower, "insufficient_scope"):
		var names []string
		for _, s := range p.Spec.ImagePullSecrets {
			names = append(names, s.Name)
		}
		if len(names) == 0 {
			return fmt.Sprintf("registry %s refused the pull without a login: the job pod has no imagePullSecrets. Create a "+
				"kubernetes.io/dockerconfigjson Secret that logs in to %s in namespace %s (and the agent's), and name it in the chart's "+
				"imagePullSecrets (the provider's image_pull_secret block creates it in both namespaces)", host, host, p.Namespace)
		}
		return fmt.Sprintf("registry %s refused the login of the job pod's imagePullSecrets (%s in namespace %s): check that each "+
			"exists in that namespace (the jobs namespace, not only the agent's) and holds a valid login for %s; they come from the "+
			"chart's imagePullSecrets, which the provider's image_pull_secret block keeps in both namespaces", host,
			strings.Join(names, ", "), p.Namespace, host)
	case strings.Contains(lower, "x509") || strings.Contains(lower, "certificate"):
		return fmt.Sprintf("the node does not trust the TLS certificate of registry %s: add the CA that signed it to the nodes' "+
			"container runtime (containerd: a hosts.toml with `ca` under its registry config_path)", host)
	case strings.Contains(lower, "not found") || strings.Contains(lower, "manifest unknown"):
		return fmt.Sprintf("check that the image name and tag exist in registry %s (mirrored with their digests, see IMAGES.md)", host)
	}
	return imagePullFallbackHint
}

// imagePullFallbackHint says what to do about an image a pod could not get, when the runtime's
// error names no more specific cause.
const imagePullFallbackHint = "check that the image name and tag exist, and that the node can pull it (registry reachable, " +
	"imagePullSecrets for a private registry; on a node without registry access, load the image there and use imagePullPolicy IfNotPresent or Never)"

// registryHost is the registry an image reference pulls from: its first element when that names
// a host (has a "." or ":", or is localhost), else Docker Hub, as the container runtimes read it.
func registryHost(image string) string {
	first, _, ok := strings.Cut(image, "/")
	if ok && (strings.ContainsAny(first, ".:") || first == "localhost") {
		return first
	}
	return "docker.io"
}

// eventImage is the image a kubelet pull event names in quotes (`Failed to pull image "…": …`),
// or "".
func eventImage(msg string) string {
	_, rest, ok := strings.Cut(msg, `image "`)
	if !ok {
		return ""
	}
	image, _, _ := strings.Cut(rest, `"`)
	return image
}
