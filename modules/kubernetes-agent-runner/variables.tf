variable "runner_id" {
  type        = string
  description = "Id of the runner to register with the orchestrator: a DNS-1123 label of at most 63 characters (checked by the names submodule, which derives every other name from it). `provider::outpost::runner_id(...)` makes one out of a kube context or cluster name."
}

variable "org_id" {
  type        = string
  description = "Organisation of the runner. Null: the organisation the outpost provider registers it in (its `org_id` or `OUTPOST_ORG_ID`). When set, it must be that organisation; the plan fails otherwise."
  default     = null

  validation {
    condition     = var.org_id == null || can(regex("^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$", var.org_id))
    error_message = "org_id must be a DNS-1123 label: at most 63 lower-case letters, digits and '-', starting and ending with a letter or digit."
  }
}

variable "description" {
  type        = string
  description = "Description of the runner."
  default     = null
}

variable "agent_namespace" {
  type        = string
  description = "Namespace of the agent and of the Secret holding its private key."
  default     = "outpost-system"
}

variable "job_namespace" {
  type        = string
  description = "Namespace the deployments' Jobs run in."
  default     = "outpost-jobs"
}

variable "job_service_account" {
  type        = string
  description = "Service account of the Jobs: the identity Terraform/OpenTofu runs with."
  default     = "outpost-job"
}

variable "job_service_account_annotations" {
  type        = map(string)
  description = "Annotations of the Jobs' service account, e.g. `eks.amazonaws.com/role-arn`, `iam.gke.io/gcp-service-account` or `azure.workload.identity/client-id`."
  default     = {}
}

variable "job_pod_labels" {
  type        = map(string)
  description = "Labels of the Job pods, e.g. `azure.workload.identity/use = \"true\"` for AKS Workload Identity."
  default     = {}
}

variable "pod_template" {
  type        = any
  description = "Pod template of the Jobs: a Kubernetes PodTemplateSpec, as an object or as the JSON string `jsonencode({...})` gives. Its container named \"main\" runs Terraform/OpenTofu; a template that names none (only metadata, say) gets one. Null uses the agent's defaults."
  default     = null

  validation {
    condition     = var.pod_template == null || !can(tostring(var.pod_template)) || can(keys(jsondecode(var.pod_template)))
    error_message = "pod_template must be an object, or a string holding a JSON object (what jsonencode({...}) gives)."
  }
}

variable "state_storage_id" {
  type        = string
  description = "Id of an existing state storage. Null creates a `kubernetes` state storage in `state_namespace`."
  default     = null
}

variable "state_namespace" {
  type        = string
  description = "Namespace of the state Secrets when the module creates the state storage."
  default     = "outpost-state"
}

variable "serve_state" {
  type        = bool
  description = "Let the agent serve state from Kubernetes Secrets (state storages of type `kubernetes`). Turn off for s3, gcs or azurerm state storages."
  default     = true
}

variable "max_concurrency" {
  type        = number
  description = "How many deployments the runner runs at once."
  default     = 5
}

variable "job_timeout" {
  type        = string
  description = "Longest a deployment may run, as a duration (\"1h\", \"90m\")."
  default     = "1h"
}

variable "key_rotation" {
  type        = string
  description = "Change this value to rotate the runner's key in one apply, without an outage: the Secret gets a new key, the runner the new public key, and the agent moves onto it without a restart."
  default     = "1"
}

variable "agent_values" {
  type        = string
  description = "Further chart values (YAML or JSON) for the agent: the last resort, for values no input sets. The inputs win over the same keys here (agent_values still wins over agent_service_account_name)."
  default     = null
}

variable "wait_for_connection" {
  type        = bool
  description = "Wait until the installed agent has connected to the orchestrator."
  default     = true
}

variable "agent_service_account_name" {
  type        = string
  description = "Name of the agent's own Kubernetes service account (chart value `serviceAccount.name`). Null: the chart's name, `outpost-agent` for the default release."
  default     = null

  validation {
    condition     = var.agent_service_account_name == null || (length(coalesce(var.agent_service_account_name, "-")) <= 253 && can(regex("^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$", var.agent_service_account_name)))
    error_message = "agent_service_account_name must be a valid Kubernetes service account name: lower-case letters, digits, '-' and '.' (a DNS-1123 subdomain)."
  }
}

variable "agent_image" {
  type = object({
    registry    = optional(string)
    repository  = optional(string)
    tag         = optional(string)
    digest      = optional(string)
    pull_policy = optional(string)
  })
  description = "Image of the agent, for a mirror or a pinned version: `registry` replaces the registry host of `repository`; `digest` (`sha256:...`) pins the image whatever the tag. Unset fields keep the chart's defaults (`ghcr.io/outpost-dev/outpost-agent` at the chart's version)."
  default     = null

  validation {
    condition     = try(var.agent_image.pull_policy, null) == null ? true : contains(["Always", "IfNotPresent", "Never"], var.agent_image.pull_policy)
    error_message = "agent_image.pull_policy must be Always, IfNotPresent or Never."
  }
  validation {
    condition     = try(var.agent_image.digest, null) == null ? true : can(regex("^sha256:[0-9a-f]{64}$", var.agent_image.digest))
    error_message = "agent_image.digest must look like sha256:<64 hex digits>."
  }
}

variable "job_image" {
  type = object({
    registry   = optional(string)
    repository = optional(string)
    tag        = optional(string)
    digest     = optional(string)
  })
  description = "Image of the Jobs' `main` container (the one that runs Terraform/OpenTofu), for a mirror or an image of your own. `tag` and `digest` need `repository`. Null: the chart's default job image. An image set on `main` in `pod_template` wins over it."
  default     = null

  validation {
    condition     = var.job_image == null ? true : (var.job_image.repository != null || (var.job_image.tag == null && var.job_image.digest == null))
    error_message = "job_image.tag and job_image.digest need job_image.repository."
  }
  validation {
    condition     = try(var.job_image.digest, null) == null ? true : can(regex("^sha256:[0-9a-f]{64}$", var.job_image.digest))
    error_message = "job_image.digest must look like sha256:<64 hex digits>."
  }
}

variable "image_registry" {
  type        = string
  description = "Registry (and path) of a private mirror of the Outpost images, for every image of the chart (`global.imageRegistry`): `registry.example.com/outpost` pulls `registry.example.com/outpost/outpost-dev/outpost-agent`. IMAGES.md says how to mirror a release. Null: the images' own registry."
  default     = null
}

variable "image_pull_secret_name" {
  type        = string
  description = "Name of the `kubernetes.io/dockerconfigjson` Secret, in `agent_namespace` and `job_namespace`, that the agent pods and the job pods pull with. Null: no login."
  default     = null
}

variable "image_pull_secret_docker_config_json" {
  type        = string
  description = "Content of that Secret (`jsonencode({auths = {\"<host>\" = {username, password, auth}}})`): the provider writes it into both namespaces and keeps it in Terraform state (sensitive). Null: the Secrets exist already."
  default     = null
  sensitive   = true

  validation {
    condition     = var.image_pull_secret_docker_config_json == null || var.image_pull_secret_name != null
    error_message = "image_pull_secret_docker_config_json needs image_pull_secret_name, the name of the Secret to write it into."
  }
}

variable "public_key" {
  type        = string
  description = "Bring your own key pair: the ed25519 public key in PEM form (`-----BEGIN PUBLIC KEY-----`, e.g. `file(\"runner_public_key.pem\")` made with `openssl pkey -pubout`). The module then generates no key; `private_key_secret` must name the Secret holding the private half. Null: the module generates the key pair."
  default     = null

  validation {
    condition     = var.public_key == null || !can(regex("PRIVATE KEY", var.public_key))
    error_message = "public_key holds a PRIVATE key. Give the public half (openssl pkey -in private.pem -pubout) and keep the private key in the Secret named by private_key_secret."
  }
  validation {
    condition     = var.public_key == null || can(regex("^\\s*-----BEGIN PUBLIC KEY-----", var.public_key))
    error_message = "public_key must be a PEM public key starting with -----BEGIN PUBLIC KEY-----."
  }
}

variable "private_key_secret" {
  type = object({
    name = string
    key  = optional(string)
  })
  description = "With `public_key`: the existing Secret in `agent_namespace` that holds the private key (PEM, PKCS#8, as `openssl genpkey -algorithm ed25519` writes it), and its data key (default `private-key.pem`). The Humanitec module's Secret uses the key `private_key`."
  default     = null
}

variable "job_pod_policy" {
  type = object({
    allow_host_namespaces       = optional(bool)
    allow_privileged            = optional(bool)
    allow_privilege_escalation  = optional(bool)
    allow_run_as_root           = optional(bool)
    allow_node_name             = optional(bool)
    allow_service_account_token = optional(bool)
    allowed_capabilities        = optional(list(string))
    allowed_volume_types        = optional(list(string))
    allowed_secrets             = optional(list(string))
    allowed_config_maps         = optional(list(string))
    pod_security_level          = optional(string)
    allowed_sysctls             = optional(list(string))
    allow_claim_sources         = optional(bool)
    allowed_claims              = optional(list(string))
    allowed_priority_classes    = optional(list(string))
    allow_tolerate_all          = optional(bool)
    allowed_runtime_classes     = optional(list(string))
    allow_agent_labels          = optional(bool)
    pod_template                = optional(any)
  })
  description = "What the runner's pod template may ask for beyond Pod Security `restricted` (the agent refuses the rest), and optionally a pinned pod template (a PodTemplateSpec object, or the JSON string jsonencode() gives) that replaces the runner's. Null keeps everything refused. See `outpost_kubernetes_agent`'s `job_pod_policy`."
  default     = null
}

variable "network_policy" {
  type = object({
    enabled       = optional(bool)
    blocked_cidrs = optional(list(string))
    metrics_from  = optional(any)
    extra_egress  = optional(any)
  })
  description = "The chart's NetworkPolicies (on by default): job pods may not reach `blocked_cidrs` (the cloud metadata service); only job pods reach the agent's state port, and only `metrics_from` (a list of Kubernetes NetworkPolicyPeer objects, or the JSON string jsonencode() gives) its metrics port. `extra_egress` adds egress rules for the job pods. Null keeps the chart's defaults. See `outpost_kubernetes_agent`'s `network_policy`."
  default     = null
}

variable "private_key_file" {
  type        = string
  description = "Bring your own key from a file: the path of the ed25519 private key (PEM, PKCS#8, as `openssl genpkey -algorithm ed25519` writes it), relative to the directory Terraform runs in. The provider reads it and writes it into a new Secret `<runner_id>-key` in `agent_namespace`; only the path enters the state. The public key is derived from it. Not with `public_key`."
  default     = null
}

variable "private_key_pem" {
  type        = string
  description = "Bring your own key as PEM text (e.g. from a secret manager), written into a new Secret `<runner_id>-key` in `agent_namespace`. Kept in the state as a sensitive value; `private_key_file` keeps it out. Not with `public_key` or `private_key_file`."
  default     = null
  sensitive   = true
}

variable "agent_service_account_annotations" {
  type        = map(string)
  description = "Annotations of the agent's own service account (chart `serviceAccount.annotations`). The agent needs no cloud identity; give cloud roles to the Jobs (`job_service_account_annotations`)."
  default     = {}
}

variable "agent_node_selector" {
  type        = map(string)
  description = "Node selector of the agent pods."
  default     = null
}

variable "agent_tolerations" {
  type = list(object({
    key                = optional(string)
    operator           = optional(string)
    value              = optional(string)
    effect             = optional(string)
    toleration_seconds = optional(number)
  }))
  description = "Taints the agent pods tolerate; the shape of `job_tolerations` and of `outpost_kubernetes_agent.tolerations`."
  default     = null
}

variable "agent_extra_env" {
  type = list(object({
    name               = string
    value              = optional(string)
    secret_key_ref     = optional(object({ name = string, key = string, optional = optional(bool) }))
    config_map_key_ref = optional(object({ name = string, key = string, optional = optional(bool) }))
  }))
  description = "Extra environment variables of the agent: a literal `value`, or a key of a Secret or ConfigMap in `agent_namespace`; the shape of `job_env`. Hand them on to the Jobs with `forward_env`. For a proxy use `proxy`."
  default     = null
}

variable "agent_resources" {
  type = object({
    requests = optional(map(string))
    limits   = optional(map(string))
  })
  description = "Resources of the agent container, merged into the chart's defaults (requests 50m CPU and 128Mi, limit 256Mi); the shape of `job_resources`."
  default     = null
}

variable "job_resources" {
  type = object({
    requests = optional(map(string))
    limits   = optional(map(string))
  })
  description = "Requests and limits of the Jobs' `main` container (the runner's `job.resources`), e.g. `{ requests = { cpu = \"500m\", memory = \"1Gi\" } }`."
  default     = null
}

variable "job_tolerations" {
  type = list(object({
    key                = optional(string)
    operator           = optional(string)
    value              = optional(string)
    effect             = optional(string)
    toleration_seconds = optional(number)
  }))
  description = "Taints the job pods tolerate (the runner's `job.tolerations`)."
  default     = null
}

variable "job_env" {
  type = list(object({
    name               = string
    value              = optional(string)
    secret_key_ref     = optional(object({ name = string, key = string, optional = optional(bool) }))
    config_map_key_ref = optional(object({ name = string, key = string, optional = optional(bool) }))
  }))
  description = "Environment variables of the Jobs' `main` container (the runner's `job.env`): a literal `value`, or a key of a Secret or ConfigMap in `job_namespace` (which `job_pod_policy` must allow)."
  default     = null
}

variable "job_node_selector" {
  type        = map(string)
  description = "Node labels the job pods must run on (the runner's `job.node_selector`)."
  default     = null
}

variable "proxy" {
  type = object({
    https    = optional(string)
    http     = optional(string)
    no_proxy = optional(list(string))
  })
  description = "HTTP(S) proxy of the agent and its job pods; `no_proxy` adds to the cluster-internal addresses. See `outpost_kubernetes_agent`'s `proxy`."
  default     = null

  validation {
    condition     = var.proxy == null ? true : alltrue([for u in compact([try(var.proxy.https, null), try(var.proxy.http, null)]) : can(regex("^(https?|socks5h?)://[^\\s]+$", u))])
    error_message = "proxy.https and proxy.http must be http://, https:// or socks5:// URLs, e.g. http://proxy.corp:3128."
  }
}

variable "ca_bundle" {
  type = object({
    pem         = optional(string)
    secret_name = optional(string)
    secret_key  = optional(string)
  })
  description = "Extra CA certificates for the agent and the job pods: `pem` (the chart writes a Secret in both namespaces) or `secret_name` of a Secret you keep in both. See `outpost_kubernetes_agent`'s `ca_bundle`."
  default     = null

  validation {
    condition     = var.ca_bundle == null ? true : (try(var.ca_bundle.pem, null) == null) != (try(var.ca_bundle.secret_name, null) == null)
    error_message = "ca_bundle needs exactly one of pem (the certificates) and secret_name (a Secret in agent_namespace and job_namespace)."
  }
}

variable "job_history" {
  type = object({
    succeeded = optional(number)
    failed    = optional(number)
  })
  description = "How many finished Jobs of each outcome stay in the cluster (0 to 1000; the chart's default is 10 each)."
  default     = null
}

variable "plugin_cache" {
  type = object({
    claim_name = optional(string)
    volume     = optional(any)
  })
  description = "Provider plugin cache of the job pods: `claim_name` of a PersistentVolumeClaim in `job_namespace`, or any Kubernetes VolumeSource as `volume` (an object, or the JSON string jsonencode() gives)."
  default     = null
}

variable "provider_installation" {
  type = object({
    network_mirror    = optional(object({ url = string, include = optional(list(string)), exclude = optional(list(string)) }))
    filesystem_mirror = optional(object({ path = string, include = optional(list(string)), exclude = optional(list(string)) }))
    direct            = optional(object({ include = optional(list(string)), exclude = optional(list(string)) }))
  })
  description = "Where the job pods' Terraform/OpenTofu install providers from (a provider mirror for clusters without registry access). See `outpost_kubernetes_agent`'s `provider_installation`."
  default     = null
}

variable "forward_env" {
  type        = list(string)
  description = "Names of the agent's environment variables (`agent_extra_env`) handed on to every job pod."
  default     = null
}
