package kubernetes

import (
	"crypto/sha256"
	"encoding/hex"
	"strconv"
	"strings"
)

// Labels and annotations the agent puts on its objects. The informers select on the labels, so
// everything the agent created is found again after a restart.
const (
	LabelManagedBy    = "app.kubernetes.io/managed-by"
	ManagedByValue    = "outpost-agent"
	LabelRunnerID     = "outpost.dev/runner-id"
	LabelOrgID        = "outpost.dev/org-id"
	LabelDeploymentID = "outpost.dev/deployment-id"
	LabelAttempt      = "outpost.dev/attempt"
	// LabelOperation (plan, apply or destroy) is on the Job and its pods so the chart's
	// PodDisruptionBudget can select the pods of applies and destroys: an eviction of one is
	// refused, while a plan's pod may be evicted and is run again (the pod failure policy).
	LabelOperation  = "outpost.dev/operation"
	AnnPendingEvent = "outpost.dev/pending-event"
	AnnFencing      = "outpost.dev/fencing"
	AnnStateKey     = "outpost.dev/state-key"
	AnnStateNS      = "outpost.dev/state-namespace"
	// AnnPlanOf names the plan deployment whose saved plan an apply runs (sealed), so the
	// state backend still lets its job runner read the plan file after an agent restart.
	AnnPlanOf       = "outpost.dev/plan-of"
	AnnDeploymentID = "outpost.dev/deployment-id"
	AnnCancel       = "outpost.dev/cancel-requested"
	AnnStartupError = "outpost.dev/startup-failure"
	// AnnNodeLost records on a Job that its pod's node was lost ("<node>: <reason>"), written
	// while the pod still shows it: the pod garbage collector deletes the pod soon after the Job
	// fails, and a new leader reads the Job, not the pod.
	AnnNodeLost    = "outpost.dev/node-lost"
	AnnClaimedAt   = "outpost.dev/claimed-at"
	AnnOperation   = "outpost.dev/operation"
	AnnTokenSHA256 = "outpost.dev/token-sha256"
	// AnnSeal and AnnPendingEventSeal hold the agent's seals (see seal.go).
	AnnSeal             = "outpost.dev/seal"
	AnnPendingEventSeal = "outpost.dev/pending-event-seal"
	tokenKey            = "token"
	stateTokenKey       = "state-token"
	tokenVolume         = "outpost-job-token"
	tokenMountPath      = "/var/run/outpost/job"
	caVolume            = "outpost-ca"
	caMountPath         = "/etc/outpost/ca"
	caFileKey           = "ca.crt"
	// The provider plugin cache, shared by the attempts (PodOptions.PluginCache).
	pluginCacheVolume    = "outpost-plugin-cache"
	pluginCacheMountPath = "/var/cache/outpost/plugins"
)

// JobName is the deterministic name of the Job of an attempt: the same claim always maps to the
// same name, so a create that meets AlreadyExists adopts instead of running twice. Ids that are
// not already DNS-1123 (or too long) are shortened and get a hash of the original id, so two ids
// never share a name.
func JobName(deploymentID string, attempt int) string {
	suffix := "-" + strconv.Itoa(attempt)
	clean := sanitize(deploymentID)
	const prefix = "outpost-"
	if clean == deploymentID && len(prefix)+len(clean)+len(suffix) <= 63 {
		return prefix + clean + suffix
	}
	sum := sha256.Sum256([]byte(deploymentID))
	hash := hex.EncodeToString(sum[:])[:10]
	room := 63 - len(prefix) - len(suffix) - len(hash) - 1
	if len(clean) > room {
		clean = strings.TrimRight(clean[:room], "-")
	}
	if clean == "" {
		return prefix + hash + suffix
	}
	return prefix + clean + "-" + hash + suffix
}

// TokenSecretName is the Secret holding the job token of the Job's attempt, given the token's
// digest (tokenDigest). The digest in the name makes the name unknowable before the claim, so
// nobody can prepare a pod that mounts the Secret of an attempt yet to come.
func TokenSecretName(jobName, tokenSHA256 string) string {
	return jobName + "-token-" + tokenSHA256[:min(16, len(tokenSHA256))]
}

// labelValue makes a deployment id usable as a label value (≤ 63, alphanumerics, '-', '_', '.');
// the exact id is kept in an annotation.
func labelValue(deploymentID string) string {
	var b strings.Builder
	for _, r := range deploymentID {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '-', r == '_', r == '.':
			b.WriteRune(r)
		default:
			b.WriteByte('-')
		}
	}
	v := b.String()
	if len(v) > 63 {
		v = v[:63]
	}
	return strings.Trim(v, "-_.")
}

// sanitize lower-cases and replaces everything outside [a-z0-9-], trimming dashes at the ends.
func sanitize(s string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(s) {
		if (r >= 'a' && r <= 'z') || (r >= '0' && r <= '9') || r == '-' {
			b.WriteRune(r)
		} else {
			b.WriteByte('-')
		}
	}
	return strings.Trim(b.String(), "-")
}
