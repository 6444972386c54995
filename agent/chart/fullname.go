package chart

import "strings"

// Fullname is the name the chart gives a release's Deployment, Service, Role and other objects
// of its own (the chart's "outpost-agent.fullname" template), for callers that must find them
// without rendering the chart: values are the release's own values (fullnameOverride and
// nameOverride are read from them). Kubernetes names of these kinds are DNS labels, so the
// result is cut at 63 characters and loses a trailing dash, as the template does.
func Fullname(releaseName string, values map[string]any) string {
	full, _ := values["fullnameOverride"].(string)
	if full == "" {
		name, _ := values["nameOverride"].(string)
		if name == "" {
			name = Name
		}
		full = releaseName + "-" + name
		if strings.Contains(releaseName, name) {
			full = releaseName
		}
	}
	if len(full) > 63 {
		full = full[:63]
	}
	return strings.TrimSuffix(full, "-")
}
