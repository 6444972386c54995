package kubernetes

import (
	"crypto/sha256"
	"encoding/hex"
	"strconv"
	"strings"
)

// Labels and annotations the agent puts on its objects. The informers select on
// the labels, so everything the agent created is found again after a restart.
const (
	LabelManagedBy  = "app.kubernetes.io/managed-by"
	ManagedByValue  = "outpost-agent"
	LabelRunnerID   = "outpost.dev/runner-id"
	LabelJobID      = "outpost.dev/job-id"
	LabelAttempt    = "outpost.dev/attempt"
	AnnFinalReport  = "outpost.dev/final-report"
	AnnFencing      = "outpost.dev/fencing"
	AnnStateKey     = "outpost.dev/state-key"
	AnnStateNS      = "outpost.dev/state-namespace"
	AnnJobID        = "outpost.dev/job-id"
	AnnCancel       = "outpost.dev/cancel-requested"
	AnnStartupError = "outpost.dev/startup-failure"
	AnnClaimedAt    = "outpost.dev/claimed-at"
	tokenKey        = "token"
	tokenVolume     = "outpost-job-token"
	tokenMountPath  = "/var/run/outpost/job"
	caVolume        = "outpost-ca"
	caMountPath     = "/etc/outpost/ca"
	caFileKey       = "ca.crt"
)

// JobName is the deterministic name of the Job of a job attempt: the same claim always maps to
// the same name, so a create that meets AlreadyExists adopts instead of running twice. Ids that
// are not already DNS-1123 (or too long) are shortened and get a hash of the original id, so two
// ids never share a name.
func JobName(jobID string, attempt int) string {
	suffix := "-" + strconv.Itoa(attempt)
	clean := sanitize(jobID)
	const prefix = "outpost-"
	if clean == jobID && len(prefix)+len(clean)+len(suffix) <= 63 {
		return prefix + clean + suffix
	}
	sum := sha256.Sum256([]byte(jobID))
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

// TokenSecretName is the Secret holding the job's token.
func TokenSecretName(jobName string) string { return jobName + "-token" }

// labelValue makes a job id usable as a label value (≤ 63, alphanumerics, '-', '_', '.'); the
// exact id is kept in an annotation.
func labelValue(jobID string) string {
	var b strings.Builder
	for _, r := range jobID {
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
