package release

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"github.com/outpost-dev/terraform-provider-outpost/tools/image/recipe"
)

// Credentials for a registry. Empty means: whatever the user's Docker configuration
// (~/.docker/config.json, credential helpers) holds, which is also where `docker login` and
// `helm registry login` write.
type Credentials struct {
	Username, Password string
}

func (c Credentials) keychain() remote.Option {
	if c.Username != "" || c.Password != "" {
		return remote.WithAuth(&authn.Basic{Username: c.Username, Password: c.Password})
	}
	return remote.WithAuthFromKeychain(authn.DefaultKeychain)
}

// Pushed is one image index in a registry.
type Pushed struct {
	Ref    string `json:"ref"`
	Digest string `json:"digest"`
}

// ReadSummary reads the images.json tools/cmd/outpost-images wrote into dir; archive names in it are
// made absolute.
func ReadSummary(dir string) ([]recipe.Built, error) {
	images, err := readSummaryFile(filepath.Join(dir, recipe.SummaryName))
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			err = fmt.Errorf("%w (build the images first: go run ./tools/cmd/outpost-images --out %s)", err, dir)
		}
		return nil, err
	}
	for i := range images {
		images[i].Archive = filepath.Join(dir, images[i].Archive)
	}
	return images, nil
}

// readSummaryFile reads an images.json, which a release also publishes as
// outpost-images_<version>.json.
func readSummaryFile(p string) ([]recipe.Built, error) {
	b, err := os.ReadFile(p)
	if err != nil {
		return nil, err
	}
	var s struct {
		Images []recipe.Built `json:"images"`
	}
	if err := json.Unmarshal(b, &s); err != nil {
		return nil, fmt.Errorf("%s: %w", p, err)
	}
	if len(s.Images) == 0 {
		return nil, fmt.Errorf("%s lists no image", p)
	}
	return s.Images, nil
}

// PushImages pushes every image index of dir's images.json to a registry, under the name and tag
// its archive holds; a non-empty registry ("registry.example.com/outpost") replaces the
// registry and namespace of that name. Each index is read back and its digest compared with the
// one built, so a registry that rewrote the manifests fails the push.
func PushImages(ctx context.Context, dir, registry string, cred Credentials, log io.Writer) ([]Pushed, error) {
	built, err := ReadSummary(dir)
	if err != nil {
		return nil, err
	}
	var out []Pushed
	for _, b := range built {
		p, err := pushArchive(ctx, b, registry, cred, log)
		if err != nil {
			return out, fmt.Errorf("pushing %s: %w", b.Ref, err)
		}
		out = append(out, p)
	}
	return out, nil
}

func pushArchive(ctx context.Context, b recipe.Built, registry string, cred Credentials, log io.Writer) (Pushed, error) {
	a, err := OpenOCIArchive(b.Archive)
	if err != nil {
		return Pushed{}, err
	}
	defer a.Close()
	digest, err := a.Index.Digest()
	if err != nil {
		return Pushed{}, err
	}
	if digest.String() != b.Digest {
		return Pushed{}, fmt.Errorf("%s holds index %s, but %s says %s: rebuild the images", b.Archive, digest, recipe.SummaryName, b.Digest)
	}
	ref, err := pushTarget(a.Ref, b.Name, registry)
	if err != nil {
		return Pushed{}, err
	}
	fmt.Fprintf(log, "release: pushing %s (%s)...\n", ref, digest)
	opts := []remote.Option{remote.WithContext(ctx), cred.keychain()}
	if err := remote.WriteIndex(ref, a.Index, opts...); err != nil {
		return Pushed{}, err
	}
	desc, err := remote.Head(ref, opts...)
	if err != nil {
		return Pushed{}, fmt.Errorf("reading %s back: %w", ref, err)
	}
	if desc.Digest != digest {
		return Pushed{}, fmt.Errorf("the registry has %s at %s, not the index pushed (%s)", desc.Digest, ref, digest)
	}
	fmt.Fprintf(log, "release: pushed %s@%s\n", ref, digest)
	return Pushed{Ref: ref.String(), Digest: digest.String()}, nil
}

// pushTarget is where the image ref (named imageName) goes: ref itself, or, when registry is
// set, registry/imageName with ref's tag.
func pushTarget(ref name.Tag, imageName, registry string) (name.Tag, error) {
	if registry == "" {
		return ref, nil
	}
	repo := strings.TrimSuffix(registry, "/") + "/" + imageName
	t, err := name.NewTag(repo+":"+ref.TagStr(), name.StrictValidation)
	if err != nil {
		return name.Tag{}, fmt.Errorf("registry %q gives no valid image reference: %w", registry, err)
	}
	return t, nil
}
