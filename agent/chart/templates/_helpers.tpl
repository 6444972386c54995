{{/*
Chart name, truncated for use in labels and names.
*/}}
{{- define "outpost-agent.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
Full name of the release's objects. Truncated at 63 characters because Service names are DNS-1035
labels.
*/}}
{{- define "outpost-agent.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{/*
Chart label value.
*/}}
{{- define "outpost-agent.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
Labels of every object of the release, without a component.
*/}}
{{- define "outpost-agent.commonLabels" -}}
helm.sh/chart: {{ include "outpost-agent.chart" . | quote }}
app.kubernetes.io/name: {{ include "outpost-agent.name" . | quote }}
app.kubernetes.io/instance: {{ .Release.Name | quote }}
app.kubernetes.io/version: {{ regexReplaceAll "^[^A-Za-z0-9]+|[^A-Za-z0-9]+$" (.Values.image.tag | default .Chart.AppVersion | trunc 63) "" | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service | quote }}
app.kubernetes.io/part-of: outpost
outpost.dev/runner-id: {{ .Values.runnerId | quote }}
{{- end }}

{{/*
Labels of the agent's objects.
*/}}
{{- define "outpost-agent.labels" -}}
{{ include "outpost-agent.commonLabels" . }}
app.kubernetes.io/component: agent
{{- end }}

{{/*
Selector labels of the agent pods.
*/}}
{{- define "outpost-agent.selectorLabels" -}}
app.kubernetes.io/name: {{ include "outpost-agent.name" . | quote }}
app.kubernetes.io/instance: {{ .Release.Name | quote }}
app.kubernetes.io/component: agent
{{- end }}

{{/*
Name of the agent's ServiceAccount.
*/}}
{{- define "outpost-agent.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "outpost-agent.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- required "serviceAccount.name is required when serviceAccount.create is false" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/*
Namespace of the deployment Jobs: a namespace of their own unless jobs.namespace says otherwise,
so job pods are never next to the runner's private key.
*/}}
{{- define "outpost-agent.jobsNamespace" -}}
{{- include "outpost-agent.ownNamespace" (dict "ctx" . "value" .Values.jobs.namespace "suffix" "jobs" "name" "jobs.namespace") }}
{{- end }}

{{/*
Namespace of the state Secrets and Leases: a namespace of its own unless state.namespace says
otherwise.
*/}}
{{- define "outpost-agent.stateNamespace" -}}
{{- include "outpost-agent.ownNamespace" (dict "ctx" . "value" .Values.state.namespace "suffix" "state" "name" "state.namespace") }}
{{- end }}

{{/*
A namespace value, or <release namespace>-<suffix> when it is empty.
Arguments: dict "ctx" $ "value" <value> "suffix" <suffix> "name" <value name>.
*/}}
{{- define "outpost-agent.ownNamespace" -}}
{{- if .value }}
{{- .value }}
{{- else }}
{{- $ns := printf "%s-%s" .ctx.Release.Namespace .suffix }}
{{- if gt (len $ns) 63 }}
{{- fail (printf "%s: the default %q is longer than 63 characters; set %s" .name $ns .name) }}
{{- end }}
{{- $ns }}
{{- end }}
{{- end }}

{{/*
What jobs.rbac.rules give the jobs' ServiceAccount: "Secrets", "workloads" (creating or changing
pods, or anything that makes pods, or tokens), both joined by " and ", or nothing. With either, a
job could read the runner's key or the states, or run a pod that does, if the jobs namespace held
them.
*/}}
{{- define "outpost-agent.jobRulesReach" -}}
{{- $workloads := list "pods" "replicationcontrollers" "serviceaccounts/token" "deployments" "statefulsets" "daemonsets" "replicasets" "jobs" "cronjobs" }}
{{- $secrets := false }}
{{- $makes := false }}
{{- range .Values.jobs.rbac.rules }}
{{- $writes := false }}
{{- range .verbs }}
{{- if has . (list "create" "update" "patch" "*") }}
{{- $writes = true }}
{{- end }}
{{- end }}
{{- range (.resources | default list) }}
{{- if or (eq . "*") (eq . "secrets") }}
{{- $secrets = true }}
{{- end }}
{{- if and $writes (or (eq . "*") (has . $workloads) (hasPrefix "pods/" .)) }}
{{- $makes = true }}
{{- end }}
{{- end }}
{{- end }}
{{- $reach := list }}
{{- if $secrets }}{{ $reach = append $reach "Secrets" }}{{ end }}
{{- if $makes }}{{ $reach = append $reach "workloads" }}{{ end }}
{{- join " and " $reach }}
{{- end }}

{{/*
Name of an object the release creates in another namespace (jobs or state). It carries the release
namespace when that differs from the object's, so two releases of the same name in different
namespaces can share a jobs or state namespace without fighting over their Roles.
Arguments: dict "ctx" $ "namespace" <target namespace> "suffix" <suffix>.
*/}}
{{- define "outpost-agent.foreignName" -}}
{{- $ctx := .ctx }}
{{- if eq .namespace $ctx.Release.Namespace }}
{{- printf "%s-%s" (include "outpost-agent.fullname" $ctx) .suffix }}
{{- else }}
{{- printf "%s-%s-%s" $ctx.Release.Namespace (include "outpost-agent.fullname" $ctx) .suffix }}
{{- end }}
{{- end }}

{{/*
Registry of the chart's images: global.imageRegistry wins over the image's own registry.
Arguments: dict "ctx" $ "image" <image values>.
*/}}
{{- define "outpost-agent.registry" -}}
{{- $global := .ctx.Values.global | default dict }}
{{- $global.imageRegistry | default .image.registry | default "" | trimSuffix "/" }}
{{- end }}

{{/*
An image reference [registry/]repository[:tag][@digest]. A registry replaces the registry host of
the repository (its first path element when that contains "." or ":" or is "localhost") so mirrors
keep the repository path; a repository without a host gets the registry as prefix. The tag defaults
to the chart's appVersion.
Arguments: dict "ctx" $ "image" <image values>.
*/}}
{{- define "outpost-agent.imageRef" -}}
{{- $registry := include "outpost-agent.registry" . }}
{{- $repo := .image.repository }}
{{- if $registry }}
{{- $parts := splitList "/" $repo }}
{{- $first := first $parts }}
{{- if and (gt (len $parts) 1) (or (contains "." $first) (contains ":" $first) (eq $first "localhost")) }}
{{- $repo = rest $parts | join "/" }}
{{- end }}
{{- $repo = printf "%s/%s" $registry $repo }}
{{- end }}
{{- $ref := printf "%s:%s" $repo (.image.tag | default .ctx.Chart.AppVersion) }}
{{- if .image.digest }}
{{- $ref = printf "%s@%s" $ref .image.digest }}
{{- end }}
{{- $ref }}
{{- end }}

{{/*
The agent image.
*/}}
{{- define "outpost-agent.image" -}}
{{- include "outpost-agent.imageRef" (dict "ctx" . "image" .Values.image) }}
{{- end }}

{{/*
The default image of the Job's main container (a runner's pod template may name another).
*/}}
{{- define "outpost-agent.jobImage" -}}
{{- include "outpost-agent.imageRef" (dict "ctx" . "image" .Values.jobs.image) }}
{{- end }}

{{/*
Names of the image pull Secrets; entries may be names or {name: …} objects.
*/}}
{{- define "outpost-agent.imagePullSecretNames" -}}
{{- $names := list }}
{{- range .Values.imagePullSecrets }}
{{- if kindIs "string" . }}
{{- $names = append $names . }}
{{- else }}
{{- $names = append $names .name }}
{{- end }}
{{- end }}
{{- join "," $names }}
{{- end }}

{{/*
NO_PROXY: the user's entries, then what must never go through a proxy inside a cluster: Services,
private ranges, loopback, and the API server's Service address (expanded by the kubelet from
KUBERNETES_SERVICE_HOST, which every container gets).
*/}}
{{- define "outpost-agent.noProxy" -}}
{{- $entries := list }}
{{- $user := .Values.proxy.noProxy }}
{{- if kindIs "string" $user }}
{{- $user = splitList "," $user }}
{{- end }}
{{- range $user }}
{{- if trim . }}
{{- $entries = append $entries (trim .) }}
{{- end }}
{{- end }}
{{- $defaults := list ".svc" ".cluster.local" "10.0.0.0/8" "172.16.0.0/12" "192.168.0.0/16" "localhost" "127.0.0.1" "$(KUBERNETES_SERVICE_HOST)" }}
{{- range $defaults }}
{{- if not (has . $entries) }}
{{- $entries = append $entries . }}
{{- end }}
{{- end }}
{{- join "," $entries }}
{{- end }}

{{/*
URL of the agent's state backend as job pods reach it.
*/}}
{{- define "outpost-agent.stateURL" -}}
{{- if .Values.state.tls.enabled }}
{{- printf "https://%s.%s.svc:8443" (include "outpost-agent.fullname" .) .Release.Namespace }}
{{- else }}
{{- printf "http://%s.%s.svc:8080" (include "outpost-agent.fullname" .) .Release.Namespace }}
{{- end }}
{{- end }}

{{/*
Whether the agent serves the state backend in plain HTTP on 8080: without TLS, or with it for the
job pods of the previous release (state.tls.plainHTTP).
*/}}
{{- define "outpost-agent.statePlain" -}}
{{- if or (not .Values.state.tls.enabled) .Values.state.tls.plainHTTP }}true{{ end }}
{{- end }}

{{/*
The state backend's ports, as NetworkPolicy ports.
*/}}
{{- define "outpost-agent.statePorts" -}}
{{- if include "outpost-agent.statePlain" . }}
- port: 8080
  protocol: TCP
{{- end }}
{{- if .Values.state.tls.enabled }}
- port: 8443
  protocol: TCP
{{- end }}
{{- end }}

{{/*
The Secret the agent keeps the state backend's CA in.
*/}}
{{- define "outpost-agent.stateTLSSecret" -}}
{{- printf "%s-state-tls" (include "outpost-agent.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
The names of the state backend's serving certificate: the Service's DNS names.
*/}}
{{- define "outpost-agent.stateTLSHosts" -}}
{{- $svc := include "outpost-agent.fullname" . }}
{{- $ns := .Release.Namespace }}
{{- printf "%s.%s.svc,%s.%s.svc.cluster.local,%s.%s,%s" $svc $ns $svc $ns $svc $ns $svc }}
{{- end }}

{{/*
Checks of value combinations the schema cannot express. Included by the Deployment, so every render
runs them.
*/}}
{{- define "outpost-agent.validate" -}}
{{- $_ := required "apiUrl is required: the base URL of the Outpost orchestrator" .Values.apiUrl }}
{{- $_ = required "orgId is required: the Outpost organization id" .Values.orgId }}
{{- $_ = required "runnerId is required: the id of the kubernetes-agent runner" .Values.runnerId }}
{{- $_ = required "privateKey.existingSecret is required: the Secret holding the runner's private key" .Values.privateKey.existingSecret }}
{{- if and (not .Values.leaderElection.enabled) (gt (int .Values.replicaCount) 1) }}
{{- fail "leaderElection.enabled=false needs replicaCount=1: unelected replicas would claim the same jobs" }}
{{- end }}
{{- $reach := include "outpost-agent.jobRulesReach" . }}
{{- $jobsNamespace := include "outpost-agent.jobsNamespace" . }}
{{- if and $reach (eq $jobsNamespace .Release.Namespace) }}
{{- fail (printf "jobs.rbac.rules give the jobs access to %s in namespace %s, which holds the agent and the runner's private key: a job could take the key. Run the jobs in a namespace of their own (leave jobs.namespace empty for %s-jobs), or drop those rules" $reach $jobsNamespace .Release.Namespace) }}
{{- end }}
{{- if and $reach .Values.state.enabled (eq $jobsNamespace (include "outpost-agent.stateNamespace" .)) }}
{{- fail (printf "jobs.rbac.rules give the jobs access to %s in namespace %s, which holds the Terraform states: a job could read or change any state. Keep the states in a namespace of their own (state.namespace), or drop those rules" $reach $jobsNamespace) }}
{{- end }}
{{- end }}

{{/*
The Secret holding the extra CA certificates: caBundle.existingSecret, or the one the chart makes
from caBundle.pem (in the release namespace and in jobs.namespace); empty without a CA bundle.
*/}}
{{- define "outpost-agent.caSecretName" -}}
{{- if and .Values.caBundle.existingSecret .Values.caBundle.pem }}
{{- fail "caBundle: set existingSecret (a Secret you create in the release namespace and jobs.namespace) or pem (the chart creates the Secrets), not both" }}
{{- end }}
{{- if .Values.caBundle.existingSecret }}
{{- .Values.caBundle.existingSecret }}
{{- else if .Values.caBundle.pem }}
{{- printf "%s-ca-bundle" (include "outpost-agent.fullname" .) | trunc 253 }}
{{- end }}
{{- end }}

{{/*
The key of the PEM bundle in that Secret: caBundle.secretKey, or ca.crt in the chart's own.
*/}}
{{- define "outpost-agent.caSecretKey" -}}
{{- if .Values.caBundle.existingSecret }}{{ .Values.caBundle.secretKey }}{{ else }}ca.crt{{ end }}
{{- end }}
