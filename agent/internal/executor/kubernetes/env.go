package kubernetes

import (
	"maps"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
)

// The environment of main beyond the agent's own variables (ownedEnv): the proxy variables and
// the agent's forwarded ones, each given only where the runner sets nothing itself.

// proxyEnv turns the agent's proxy variables into main's: each in upper case (Go, most tools) and
// lower case (curl, and so git, reads http_proxy only in lower case), in a fixed order.
func proxyEnv(vars map[string]string) []corev1.EnvVar {
	names := make([]string, 0, len(vars))
	for k := range vars {
		names = append(names, k)
	}
	slices.Sort(names)
	var out []corev1.EnvVar
	for _, k := range names {
		out = append(out, corev1.EnvVar{Name: strings.ToUpper(k), Value: vars[k]}, corev1.EnvVar{Name: strings.ToLower(k), Value: vars[k]})
	}
	return out
}

// setsProxy reports whether a template's main sets a proxy variable itself; then the template
// decides about proxies for this runner, and none of the agent's are added (a mix of the two
// would be neither).
func setsProxy(env []corev1.EnvVar) bool {
	return slices.ContainsFunc(env, func(e corev1.EnvVar) bool {
		switch strings.ToUpper(e.Name) {
		case "HTTPS_PROXY", "HTTP_PROXY", "NO_PROXY", "ALL_PROXY":
			return true
		}
		return false
	})
}

// forwardEnv turns the agent's forwarded variables into main's, in a fixed order, leaving out
// those without a value.
func forwardEnv(vars map[string]string) []corev1.EnvVar {
	var out []corev1.EnvVar
	for _, k := range slices.Sorted(maps.Keys(vars)) {
		if vars[k] != "" {
			out = append(out, corev1.EnvVar{Name: k, Value: vars[k]})
		}
	}
	return out
}

// addAbsent appends the variables of add whose names env does not set.
func addAbsent(env, add []corev1.EnvVar) []corev1.EnvVar {
	for _, a := range add {
		if !slices.ContainsFunc(env, func(e corev1.EnvVar) bool { return e.Name == a.Name }) {
			env = append(env, a)
		}
	}
	return env
}
