package api

import (
	"fmt"
	"net/url"
	"regexp"
	"strings"

	"github.com/outpost-dev/terraform-provider-outpost/internal/keys"
)

// FieldError is a validation failure of one field of a request body. The orchestrator returns it
// as a 400 whose body names the field; the provider uses the same checks at plan time.
type FieldError struct {
	Field   string
	Message string
}

func (e *FieldError) Error() string { return e.Field + ": " + e.Message }

// Is makes errors.Is(err, ErrInvalid) true.
func (e *FieldError) Is(target error) bool { return target == ErrInvalid }

func fieldErr(field, format string, args ...any) error {
	return &FieldError{Field: field, Message: fmt.Sprintf(format, args...)}
}

var (
	dns1123Label     = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`)
	dns1123Subdomain = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`)
	stateKeyPattern  = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._/-]*$`)
	variableName     = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_-]*$`)
	bucketName       = regexp.MustCompile(`^[a-z0-9][a-z0-9._-]{1,220}[a-z0-9]$`)
)

// ValidateID checks a resource id: a DNS-1123 label (lower-case letters, digits, '-', at most 63
// characters), because ids end up in Kubernetes object names and labels.
func ValidateID(field, id string) error {
	return validateLabel(field, id, "an id")
}

// ValidateNamespace checks a Kubernetes namespace name.
func ValidateNamespace(field, ns string) error {
	return validateLabel(field, ns, "a Kubernetes namespace")
}

func validateLabel(field, v, what string) error {
	switch {
	case v == "":
		return fieldErr(field, "is required")
	case len(v) > 63:
		return fieldErr(field, "%q is %d characters; %s has at most 63", v, len(v), what)
	case !dns1123Label.MatchString(v):
		return fieldErr(field, "%q is not valid as %s: use lower-case letters, digits and '-', starting and ending with a letter or digit (DNS-1123 label)", v, what)
	}
	return nil
}

// ValidateServiceAccount checks a Kubernetes service account name (DNS-1123 subdomain).
func ValidateServiceAccount(field, name string) error {
	switch {
	case name == "":
		return fieldErr(field, "is required")
	case len(name) > 253 || !dns1123Subdomain.MatchString(name):
		return fieldErr(field, "%q is not a valid service account name: use lower-case letters, digits, '-' and '.' (DNS-1123 subdomain)", name)
	}
	return nil
}

// ValidatePublicKeys checks the runner's public keys: one or two distinct ed25519 PEM keys.
func ValidatePublicKeys(field string, pems []string) error {
	if len(pems) == 0 {
		return fieldErr(field, "at least one public key is required")
	}
	if len(pems) > 2 {
		return fieldErr(field, "%d keys given; at most two are allowed (the current one and the next, during rotation)", len(pems))
	}
	seen := map[string]int{}
	for i, p := range pems {
		pub, err := keys.ParsePublicPEM(p)
		if err != nil {
			return fieldErr(fmt.Sprintf("%s[%d]", field, i), "%v", err)
		}
		fp := keys.Fingerprint(pub)
		if j, dup := seen[fp]; dup {
			return fieldErr(fmt.Sprintf("%s[%d]", field, i), "same key as %s[%d] (%s)", field, j, fp)
		}
		seen[fp] = i
	}
	return nil
}

// Validate checks a runner create or update body, all but its pod template: that check needs the
// Kubernetes types, which this package keeps out of the orchestrator's and the client's imports,
// so callers also run podtemplate.Validate("job.pod_template", …).
func (in *RunnerInput) Validate() error {
	if err := ValidateID("id", in.ID); err != nil {
		return err
	}
	if len(in.Description) > 1024 {
		return fieldErr("description", "at most 1024 characters")
	}
	if err := ValidatePublicKeys("public_keys", in.PublicKeys); err != nil {
		return err
	}
	if err := ValidateNamespace("job.namespace", in.Job.Namespace); err != nil {
		return err
	}
	if err := ValidateServiceAccount("job.service_account", in.Job.ServiceAccount); err != nil {
		return err
	}
	if err := ValidateID("state_storage_id", in.StateStorageID); err != nil {
		return err
	}
	if in.MaxConcurrency < 0 || in.MaxConcurrency > MaxMaxConcurrency {
		return fieldErr("max_concurrency", "%d is out of range; use 1 to %d", in.MaxConcurrency, MaxMaxConcurrency)
	}
	if in.JobTimeoutSeconds != 0 && (in.JobTimeoutSeconds < 60 || in.JobTimeoutSeconds > MaxJobTimeoutSeconds) {
		return fieldErr("job_timeout_seconds", "%d is out of range; use 60 to %d seconds", in.JobTimeoutSeconds, MaxJobTimeoutSeconds)
	}
	return nil
}

// Validate checks a state storage create or update body.
func (in *StateStorageInput) Validate() error {
	if err := ValidateID("id", in.ID); err != nil {
		return err
	}
	blocks := map[string]bool{
		StateStorageKubernetes: in.Kubernetes != nil,
		StateStorageS3:         in.S3 != nil,
		StateStorageGCS:        in.GCS != nil,
		StateStorageAzureRM:    in.AzureRM != nil,
	}
	if _, ok := blocks[in.Type]; !ok {
		return fieldErr("type", "%q is not a state storage type; use one of %s", in.Type, strings.Join(StateStorageTypes, ", "))
	}
	for t, set := range blocks {
		if set && t != in.Type {
			return fieldErr(t, "is set but type is %q; set only the %q block", in.Type, in.Type)
		}
	}
	if !blocks[in.Type] {
		return fieldErr(in.Type, "is required when type is %q", in.Type)
	}
	switch in.Type {
	case StateStorageKubernetes:
		return ValidateNamespace("kubernetes.namespace", in.Kubernetes.Namespace)
	case StateStorageS3:
		if !bucketName.MatchString(in.S3.Bucket) {
			return fieldErr("s3.bucket", "%q is not a valid bucket name", in.S3.Bucket)
		}
		if in.S3.Region == "" {
			return fieldErr("s3.region", "is required")
		}
		return validatePrefix("s3.path_prefix", in.S3.PathPrefix)
	case StateStorageGCS:
		if !bucketName.MatchString(in.GCS.Bucket) {
			return fieldErr("gcs.bucket", "%q is not a valid bucket name", in.GCS.Bucket)
		}
		return validatePrefix("gcs.path_prefix", in.GCS.PathPrefix)
	case StateStorageAzureRM:
		if in.AzureRM.StorageAccountName == "" {
			return fieldErr("azurerm.storage_account_name", "is required")
		}
		if in.AzureRM.ContainerName == "" {
			return fieldErr("azurerm.container_name", "is required")
		}
		return validatePrefix("azurerm.path_prefix", in.AzureRM.PathPrefix)
	}
	return nil
}

func validatePrefix(field, p string) error {
	if p != "" && !stateKeyPattern.MatchString(p) {
		return fieldErr(field, "%q may only hold letters, digits, '.', '_', '-' and '/'", p)
	}
	return nil
}

// ValidateStateKey checks a deployment's state key.
func ValidateStateKey(field, key string) error {
	switch {
	case key == "":
		return fieldErr(field, "is required")
	case len(key) > 256:
		return fieldErr(field, "at most 256 characters")
	case !stateKeyPattern.MatchString(key) || strings.Contains(key, ".."):
		return fieldErr(field, "%q may only hold letters, digits, '.', '_', '-' and '/', must start with a letter or digit and must not contain '..'", key)
	}
	return nil
}

// Validate checks a deployment create body.
func (in *DeploymentInput) Validate() error {
	if err := ValidateID("runner_id", in.RunnerID); err != nil {
		return err
	}
	if !in.Operation.Valid() {
		return fieldErr("operation", "%q is not an operation; use plan, apply or destroy", in.Operation)
	}
	switch {
	case in.Source.Inline == nil && in.Source.Git == nil:
		return fieldErr("source", "set exactly one of inline or git")
	case in.Source.Inline != nil && in.Source.Git != nil:
		return fieldErr("source", "set exactly one of inline or git, not both")
	case in.Source.Inline != nil:
		if len(in.Source.Inline.ArchiveTarGz) == 0 {
			return fieldErr("source.inline.archive_tar_gz", "is empty; give a gzip-compressed tar of the .tf files")
		}
		if len(in.Source.Inline.ArchiveTarGz) < 2 || in.Source.Inline.ArchiveTarGz[0] != 0x1f || in.Source.Inline.ArchiveTarGz[1] != 0x8b {
			return fieldErr("source.inline.archive_tar_gz", "is not gzip data; give a gzip-compressed tar of the .tf files")
		}
	default:
		u, err := url.Parse(in.Source.Git.URL)
		if in.Source.Git.URL == "" || err != nil || (u.Scheme != "https" && u.Scheme != "http" && u.Scheme != "ssh" && u.Scheme != "file" && !strings.Contains(in.Source.Git.URL, "@")) {
			return fieldErr("source.git.url", "%q is not a git URL (https://, ssh://, git@host:path or file://)", in.Source.Git.URL)
		}
		if strings.Contains(in.Source.Git.Path, "..") {
			return fieldErr("source.git.path", "must not contain '..'")
		}
	}
	for name := range in.Variables {
		if !variableName.MatchString(name) {
			return fieldErr("variables."+name, "is not a valid Terraform variable name")
		}
	}
	if err := ValidateStateKey("state_key", in.StateKey); err != nil {
		return err
	}
	if in.TimeoutSeconds != 0 && (in.TimeoutSeconds < 60 || in.TimeoutSeconds > MaxJobTimeoutSeconds) {
		return fieldErr("timeout_seconds", "%d is out of range; use 60 to %d seconds", in.TimeoutSeconds, MaxJobTimeoutSeconds)
	}
	switch {
	case (in.SavePlan || in.PlanDestroy || in.PlanTTLSeconds != 0) && in.Operation != OperationPlan:
		return fieldErr("save_plan", "save_plan, plan_destroy and plan_ttl_seconds go with operation plan only; an apply of a saved plan is POST .../deployments/{plan deployment id}/apply")
	case (in.PlanDestroy || in.PlanTTLSeconds != 0) && !in.SavePlan:
		return fieldErr("save_plan", "plan_destroy and plan_ttl_seconds need save_plan: true")
	case in.PlanTTLSeconds != 0 && (in.PlanTTLSeconds < MinPlanTTLSeconds || in.PlanTTLSeconds > MaxPlanTTLSeconds):
		return fieldErr("plan_ttl_seconds", "%d is out of range; use %d to %d seconds", in.PlanTTLSeconds, MinPlanTTLSeconds, MaxPlanTTLSeconds)
	}
	return nil
}
