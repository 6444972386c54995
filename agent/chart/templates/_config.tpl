{{/*
The agent's configuration file (agent/internal/config), rendered from the values. Its keys are
named like the values they come from, so an error the agent reports names the value to fix. It
holds no secret: the private key, the state encryption key and the CA bundle stay in Secrets the
agent reads through the API or from mounted files.
*/}}
{{- define "outpost-agent.config" -}}
{{- $fullname := include "outpost-agent.fullname" . }}
{{- $pullSecrets := include "outpost-agent.imagePullSecretNames" . }}
{{- /* The job pod policy; an API token only when the chart mounts one; job pods may not carry
the labels of the agent Service's selector. */}}
{{- $policy := merge (dict "allowServiceAccountToken" .Values.jobs.serviceAccount.automountToken "agentSelector" (include "outpost-agent.selectorLabels" . | fromYaml)) (deepCopy .Values.jobs.policy) }}
{{- $jobs := dict
  "namespace" (include "outpost-agent.jobsNamespace" .)
  "serviceAccount" .Values.jobs.serviceAccount.name
  "image" (include "outpost-agent.jobImage" .)
  "agentImage" (include "outpost-agent.image" .)
  "startupTimeout" .Values.jobs.startupTimeout
  "policy" $policy
  "podSecurityContext" (.Values.jobs.podSecurityContext | default dict)
  "securityContext" (.Values.jobs.securityContext | default dict)
  "resources" (.Values.jobs.resources | default dict)
  "providerInstallation" .Values.jobs.providerInstallation
  "history" (dict "succeeded" (int .Values.jobs.history.succeeded) "failed" (int .Values.jobs.history.failed))
  "forwardEnv" (.Values.jobs.forwardEnv | default list)
  "podLabels" (.Values.jobs.podLabels | default dict)
  "imagePullSecrets" (compact (splitList "," $pullSecrets))
}}
{{- with .Values.jobs.pluginCache }}
{{- $_ := set $jobs "pluginCache" . }}
{{- end }}
{{- with .Values.jobs.podTemplate }}
{{- $_ := set $jobs "podTemplate" . }}
{{- end }}
{{- $state := dict
  "url" (include "outpost-agent.stateURL" .)
  "listen" (ternary ":8080" "" (eq (include "outpost-agent.statePlain" .) "true"))
  "limits" (dict "maxBodyBytes" (int64 .Values.state.limits.maxBodyBytes) "maxRequests" (int .Values.state.limits.maxRequests) "maxRequestsPerJob" (int .Values.state.limits.maxRequestsPerJob))
  "versions" (dict "keep" (int .Values.state.versions.keep) "maxAge" (.Values.state.versions.maxAge | default "0s"))
}}
{{- if .Values.state.enabled }}
{{- $_ := set $state "namespace" (include "outpost-agent.stateNamespace" .) }}
{{- if .Values.state.encryption.existingSecret }}
{{- $_ := set $state "encryptionKeyFile" "/etc/outpost/state-key/key" }}
{{- end }}
{{- end }}
{{- if .Values.state.tls.enabled }}
{{- $_ := set $state "tls" (dict "secret" (include "outpost-agent.stateTLSSecret" .) "listen" ":8443" "hosts" (splitList "," (include "outpost-agent.stateTLSHosts" .))) }}
{{- end }}
{{- $config := dict
  "apiUrl" .Values.apiUrl
  "insecureAllowHttp" .Values.insecureAllowHttp
  "orgId" .Values.orgId
  "runnerId" .Values.runnerId
  "privateKey" (dict "existingSecret" .Values.privateKey.existingSecret "secretKey" .Values.privateKey.secretKey)
  "cli" .Values.cli
  "logLevel" .Values.logLevel
  "logFormat" .Values.logFormat
  "leaderElection" (dict "enabled" .Values.leaderElection.enabled "leaseName" $fullname)
  "kubeClient" (dict "qps" .Values.kubeClient.qps "burst" (int .Values.kubeClient.burst))
  "healthListen" ":9090"
  "tracing" (dict "endpoint" .Values.tracing.endpoint)
  "state" $state
  "jobs" $jobs
}}
{{- with include "outpost-agent.caSecretName" . }}
{{- $_ := set $config "caBundleFile" "/etc/outpost/ca/ca.crt" }}
{{- $_ := set $jobs "caSecret" . }}
{{- $_ := set $jobs "caSecretKey" (include "outpost-agent.caSecretKey" $) }}
{{- end }}
{{- toYaml $config }}
{{- end }}

{{/*
The ConfigMap that holds the agent's configuration file.
*/}}
{{- define "outpost-agent.configMapName" -}}
{{- printf "%s-config" (include "outpost-agent.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}
