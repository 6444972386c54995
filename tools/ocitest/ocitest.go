// Package ocitest reaches the test bed's OCI registry and images through go-containerregistry,
// for tests and the demo: the options that push to and read from Cluster.Registry, and the
// toolbox program as a layer.
// It lives in the tools module because the test bed itself (internal/testbed, imported by the
// product's own tests) keeps image libraries out of the root go.mod (ARCHITECTURE.md, "Modules").
package ocitest

import (
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"io"

	"github.com/google/go-containerregistry/pkg/authn"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/outpost-dev/terraform-provider-outpost/internal/testbed"
)

// RemoteOptions are the go-containerregistry options that push to and read from the test bed's
// registry r: its CA, its login, and ctx.
func RemoteOptions(ctx context.Context, r *testbed.Registry) ([]remote.Option, error) {
	if r == nil {
		return nil, errors.New("ocitest: this test bed runs no registry (testbed.Options{Node: true})")
	}
	t, err := r.Transport()
	if err != nil {
		return nil, err
	}
	return []remote.Option{
		remote.WithContext(ctx),
		remote.WithTransport(t),
		remote.WithAuth(&authn.Basic{Username: r.Username, Password: r.Password}),
	}, nil
}

// ToolboxLayer returns an image layer holding the toolbox program (testbed.ToolboxImage's one
// file) as /testbed-pod, for a test image that needs it beside other content: a job image whose
// Terraform runs `/testbed-pod reach …` through local-exec, say.
func ToolboxLayer() (v1.Layer, error) {
	b, err := testbed.ToolboxLayerTar()
	if err != nil {
		return nil, err
	}
	return tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(b)), nil },
		tarball.WithCompressionLevel(gzip.BestSpeed), tarball.WithMediaType(types.OCILayer))
}
