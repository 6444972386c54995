// Package chart carries the outpost-agent Helm chart inside the Go binaries that install it.
//
// The provider installs the agent through the embedded Helm SDK, so the chart travels with the
// provider: no chart repository to reach (air-gapped clusters), and a provider version always
// installs the chart it was tested with. The chart's files live next to this file; .helmignore
// keeps the Go files out of the chart when it is packaged with the helm CLI.
//
// Importers usually alias the package, because Helm's own chart package has the same name:
//
//	import agentchart "github.com/outpost-dev/terraform-provider-outpost/agent/chart"
package chart

import (
	"embed"
	"fmt"
	"io/fs"

	helmchart "helm.sh/helm/v3/pkg/chart"
	"helm.sh/helm/v3/pkg/chart/loader"

	"github.com/outpost-dev/terraform-provider-outpost/internal/version"
)

const (
	// Name is the chart's name, which is also the default name of the release's objects.
	Name = "outpost-agent"
	// Version is the chart version in Chart.yaml. The provider records it on the release and
	// compares it with an installed release to decide whether an upgrade is due.
	Version = "0.1.0"
	// AppVersion is the agent version the chart deploys by default (the default image tag). It is
	// locked to the chart version so that chart and agent upgrade together.
	AppVersion = "0.1.0"
)

// files holds the chart. "all:" keeps templates/_helpers.tpl, which embed would skip otherwise;
// .helmignore comes along because `helm package` puts it into chart archives too.
//
//go:embed Chart.yaml values.yaml values.schema.json README.md .helmignore all:templates
var files embed.FS

// InstallVersions are the chart version and appVersion (the default image tag) the embedded chart
// is installed with. A release build (version.Release) installs its own release version as
// both, so the provider of a release installs the chart and the agent image of that same release
// (the release packages and tags them with it); any other build keeps the chart's own Version
// and AppVersion.
func InstallVersions() (chartVersion, appVersion string) {
	if version.Release() {
		return version.Version, version.Version
	}
	return Version, AppVersion
}

// Load returns the embedded chart, parsed by Helm's loader, with the InstallVersions. Every call
// returns a fresh copy, so a caller may change it (e.g. its values) without affecting other
// callers.
func Load() (*helmchart.Chart, error) {
	var buffered []*loader.BufferedFile
	err := fs.WalkDir(files, ".", func(name string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		data, err := files.ReadFile(name)
		if err != nil {
			return err
		}
		buffered = append(buffered, &loader.BufferedFile{Name: name, Data: data})
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("reading the embedded %s chart: %w", Name, err)
	}
	c, err := loader.LoadFiles(buffered)
	if err != nil {
		return nil, fmt.Errorf("loading the embedded %s chart: %w", Name, err)
	}
	c.Metadata.Version, c.Metadata.AppVersion = InstallVersions()
	return c, nil
}
