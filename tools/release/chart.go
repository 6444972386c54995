package release

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"strings"

	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/registry"

	agentchart "github.com/outpost-dev/terraform-provider-outpost/agent/chart"
)

// PackageChart writes the agent chart as outDir/outpost-agent-<version>.tgz with version as its
// version and appVersion: the chart of a release deploys the images of the same release by
// default, as the provider of that release does.
func PackageChart(version, outDir string) (string, error) {
	c, err := agentchart.Load()
	if err != nil {
		return "", err
	}
	c.Metadata.Version, c.Metadata.AppVersion = version, version
	if err := c.Validate(); err != nil {
		return "", fmt.Errorf("the chart with version %q: %w (a chart version is SemVer 2, like 1.2.3 or 1.2.3-rc.1)", version, err)
	}
	if err := os.MkdirAll(outDir, 0o755); err != nil {
		return "", err
	}
	p, err := chartutil.Save(c, outDir)
	if err != nil {
		return "", fmt.Errorf("packaging the chart: %w", err)
	}
	return p, nil
}

// ChartPush says where a chart was pushed.
type ChartPush struct {
	// Ref is registry/path/outpost-agent:<version>; install it with
	// `helm install NAME oci://<registry/path>/outpost-agent --version <version>`.
	Ref    string `json:"ref"`
	Digest string `json:"digest"`
}

// PushChart pushes a packaged chart to an OCI registry repository ("oci://ghcr.io/outpost-dev/charts";
// the chart's name and version make the rest of the reference) with the Helm SDK's registry
// client, as `helm push` does. plainHTTP talks HTTP instead of HTTPS (a registry on loopback).
func PushChart(tgz, repo string, cred Credentials, plainHTTP bool, log io.Writer) (ChartPush, error) {
	data, err := os.ReadFile(tgz)
	if err != nil {
		return ChartPush{}, err
	}
	ref, err := chartRef(tgz, data, repo)
	if err != nil {
		return ChartPush{}, err
	}
	opts := []registry.ClientOption{registry.ClientOptWriter(log)}
	if plainHTTP {
		opts = append(opts, registry.ClientOptPlainHTTP())
	}
	if cred.Username != "" || cred.Password != "" {
		opts = append(opts, registry.ClientOptBasicAuth(cred.Username, cred.Password))
	}
	client, err := registry.NewClient(opts...)
	if err != nil {
		return ChartPush{}, err
	}
	res, err := client.Push(data, ref)
	if err != nil {
		return ChartPush{}, fmt.Errorf("pushing the chart to %s: %w", ref, err)
	}
	return ChartPush{Ref: res.Ref, Digest: res.Manifest.Digest}, nil
}

// chartRef is where a chart archive (data, read from tgz) goes in the OCI repository repo:
// registry/path/<name>:<version>, as `helm push` names it.
func chartRef(tgz string, data []byte, repo string) (string, error) {
	c, err := loader.LoadArchive(bytes.NewReader(data))
	if err != nil {
		return "", fmt.Errorf("%s is not a chart archive: %w", tgz, err)
	}
	host, ok := strings.CutPrefix(repo, "oci://")
	if !ok {
		return "", fmt.Errorf("chart repository %q must start with oci://", repo)
	}
	return strings.TrimSuffix(host, "/") + "/" + c.Name() + ":" + c.Metadata.Version, nil
}
