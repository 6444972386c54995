package release

import (
	"archive/tar"
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/url"
	"path"
	"regexp"
	"sort"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
)

// dpkgStatusDir is where the images keep one control record per Debian package (the distroless
// layout scanners read), so the packages can be listed from the image itself.
const dpkgStatusDir = "var/lib/dpkg/status.d/"

// historyModule finds "from <module>@<version>" in a layer's history line, which is how the
// image build records the module a program was built from inside the module cache (the go
// command records no version for such a build).
var historyModule = regexp.MustCompile(`from ([A-Za-z0-9./_~-]+)@(v[0-9][^\s)]*)`)

// ImageSBOM is the bill of materials of one platform image of an archive.
type ImageSBOM struct {
	// Platform is "linux/amd64".
	Platform string
	// Programs and DebianPackages count what was found.
	Programs, DebianPackages int
	write                    func(io.Writer) error
}

// Write writes the SPDX document.
func (s ImageSBOM) Write(w io.Writer) error { return s.write(w) }

// ImageSBOMs reads every platform image of an archive's index and describes each: the image (by
// its manifest digest), the Debian packages its dpkg records list, and every Go program in it
// with the modules it was built from. Programs of Outpost's module take version.
func ImageSBOMs(a *OCIArchive, version string, created time.Time) ([]ImageSBOM, error) {
	m, err := a.Index.IndexManifest()
	if err != nil {
		return nil, err
	}
	var out []ImageSBOM
	for _, d := range m.Manifests {
		img, err := a.Index.Image(d.Digest)
		if err != nil {
			return nil, err
		}
		s, err := imageSBOM(a, img, d, version, created)
		if err != nil {
			return nil, fmt.Errorf("%s (%s): %w", a.Ref, d.Digest, err)
		}
		out = append(out, s)
	}
	return out, nil
}

func imageSBOM(a *OCIArchive, img v1.Image, d v1.Descriptor, version string, created time.Time) (ImageSBOM, error) {
	if d.Platform == nil {
		return ImageSBOM{}, errors.New("the index names no platform for this image")
	}
	plat := d.Platform.OS + "/" + d.Platform.Architecture
	cf, err := img.ConfigFile()
	if err != nil {
		return ImageSBOM{}, err
	}
	versions := map[string]string{ModulePath: version}
	for _, h := range cf.History {
		if m := historyModule.FindStringSubmatch(h.CreatedBy); m != nil {
			versions[m[1]] = m[2]
		}
	}
	files, err := imageFiles(img)
	if err != nil {
		return ImageSBOM{}, err
	}
	repo := a.Ref.Context().Name()
	purl := fmt.Sprintf("pkg:oci/%s@%s?arch=%s&repository_url=%s&tag=%s", path.Base(repo), url.QueryEscape(d.Digest.String()),
		d.Platform.Architecture, url.QueryEscape(repo), url.QueryEscape(a.Ref.TagStr()))
	b, root := newBOM(path.Base(repo)+"_"+a.Ref.TagStr()+"_"+strings.ReplaceAll(plat, "/", "_"), d.Digest.String(), created, Package{
		Name: repo, VersionInfo: a.Ref.TagStr(), PrimaryPurpose: "CONTAINER",
		Checksums:    []Checksum{{Algorithm: "SHA256", Value: d.Digest.Hex}},
		Comment:      "the " + plat + " image of " + a.Ref.String() + ", manifest " + d.Digest.String(),
		ExternalRefs: purlRef(purl),
	})
	distro := "debian-" + osRelease(files.osRelease)["VERSION_ID"]
	s := ImageSBOM{Platform: plat}
	for _, p := range sortedKeys(files.dpkg) {
		c := parseControl(files.dpkg[p])
		if c["Package"] == "" || c["Version"] == "" {
			return ImageSBOM{}, fmt.Errorf("%s: a dpkg record without Package or Version", p)
		}
		q := url.Values{"arch": {c["Architecture"]}, "distro": {distro}}
		if src := c["Source"]; src != "" {
			q.Set("upstream", strings.Fields(src)[0])
		}
		id := b.add(Package{
			Name: c["Package"], VersionInfo: c["Version"], PrimaryPurpose: "LIBRARY", Supplier: "Organization: Debian",
			ExternalRefs: purlRef("pkg:deb/debian/" + c["Package"] + "@" + purlVersion(c["Version"]) + "?" + q.Encode()),
		})
		b.relate(root, "CONTAINS", id)
		s.DebianPackages++
	}
	sort.Slice(files.programs, func(i, j int) bool { return files.programs[i].path < files.programs[j].path })
	for _, p := range files.programs {
		b.addProgram(root, p, versions)
		s.Programs++
	}
	s.write = b.write
	return s, nil
}

// layerFiles is what a bill of materials needs of an image's file system: the dpkg records, the
// os-release file and the Go programs, as the top layer that has each left it.
type layerFiles struct {
	dpkg      map[string][]byte
	osRelease []byte
	programs  []program
}

func imageFiles(img v1.Image) (*layerFiles, error) {
	layers, err := img.Layers()
	if err != nil {
		return nil, err
	}
	f := &layerFiles{dpkg: map[string][]byte{}}
	progs := map[string]program{}
	for i, l := range layers {
		if err := f.readLayer(l, progs); err != nil {
			return nil, fmt.Errorf("layer %d: %w", i, err)
		}
	}
	for _, p := range progs {
		f.programs = append(f.programs, p)
	}
	return f, nil
}

func (f *layerFiles) readLayer(l v1.Layer, progs map[string]program) error {
	rc, err := l.Uncompressed()
	if err != nil {
		return err
	}
	defer rc.Close()
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		p := strings.TrimPrefix(path.Clean("/"+h.Name), "/")
		if h.Typeflag != tar.TypeReg {
			continue
		}
		switch {
		case strings.HasPrefix(p, dpkgStatusDir):
			if f.dpkg[p], err = io.ReadAll(io.LimitReader(tr, 1<<20)); err != nil {
				return err
			}
		case p == "etc/os-release" || p == "usr/lib/os-release":
			if f.osRelease, err = io.ReadAll(io.LimitReader(tr, 1<<16)); err != nil {
				return err
			}
		default:
			br := bufio.NewReader(tr)
			head, _ := br.Peek(4)
			if !isExecutable(head) {
				continue
			}
			data, err := io.ReadAll(io.LimitReader(br, maxProgramSize))
			if err != nil {
				return err
			}
			if prog, ok := readProgram("/"+p, data); ok {
				progs[p] = prog
			}
		}
	}
}

// parseControl reads the fields of a Debian control record ("Name: value" lines; continuation
// lines start with a space and are left out).
func parseControl(b []byte) map[string]string {
	out := map[string]string{}
	for line := range strings.SplitSeq(string(b), "\n") {
		if line == "" || line[0] == ' ' || line[0] == '\t' {
			continue
		}
		if k, v, ok := strings.Cut(line, ":"); ok {
			out[k] = strings.TrimSpace(v)
		}
	}
	return out
}

// osRelease reads an os-release file's KEY=value lines.
func osRelease(b []byte) map[string]string {
	out := map[string]string{}
	for line := range strings.SplitSeq(string(bytes.TrimSpace(b)), "\n") {
		if k, v, ok := strings.Cut(strings.TrimSpace(line), "="); ok {
			out[k] = strings.Trim(v, `"'`)
		}
	}
	return out
}
