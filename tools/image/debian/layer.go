package debian

import (
	"bytes"
	"context"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"os/exec"
	"path"
	"strings"

	"github.com/outpost-dev/terraform-provider-outpost/tools/image"
)

// StatusDir is where each package's control record goes, one file per package: the layout
// distroless images use, which image scanners (Trivy, Grype, Syft) read to know what is
// installed without a dpkg database.
const StatusDir = "var/lib/dpkg/status.d"

// CABundle is the PEM bundle of the Mozilla CA certificates that update-ca-certificates would
// have made, at the path OpenSSL, GnuTLS (git's libcurl) and Go all look at first.
const CABundle = "etc/ssl/certs/ca-certificates.crt"

// dropped says whether a path of a package is left out of images: documentation (but not the
// copyright files, which the licences ask to ship with the binaries), manual and info pages,
// translations, and lintian overrides. None of it is read by the programs.
func dropped(p string) bool {
	for _, prefix := range []string{"usr/share/man/", "usr/share/info/", "usr/share/locale/", "usr/share/lintian/"} {
		if strings.HasPrefix(p, prefix) {
			return true
		}
	}
	if rest, ok := strings.CutPrefix(p, "usr/share/doc/"); ok {
		// Keep usr/share/doc/<package>/ and usr/share/doc/<package>/copyright.
		parts := strings.Split(rest, "/")
		return len(parts) > 2 || (len(parts) == 2 && parts[1] != "copyright")
	}
	return false
}

// AddTo extracts the files of the named packages of set into f (all of them when names is
// empty), leaving out what dropped says, and writes each package's control record to StatusDir.
func AddTo(ctx context.Context, f *image.Files, set *Set, names ...string) error {
	want := map[string]bool{}
	for _, n := range names {
		want[n] = true
	}
	added := 0
	for _, p := range set.Packages {
		if len(names) > 0 && !want[p.Name] {
			continue
		}
		added++
		if err := addPackage(ctx, f, p); err != nil {
			return fmt.Errorf("%s %s: %w", p.Name, p.Version, err)
		}
	}
	if len(names) > 0 && added != len(want) {
		return fmt.Errorf("debian: asked for %v, the %s package set has %v", names, set.Arch, set.Names())
	}
	return nil
}

func addPackage(ctx context.Context, f *image.Files, p Package) error {
	cmd := exec.CommandContext(ctx, "dpkg-deb", "--fsys-tarfile", p.File)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		return err
	}
	addErr := f.AddTar(out, func(name string, _ byte) bool { return !dropped(name) })
	waitErr := cmd.Wait()
	if addErr != nil {
		return addErr
	}
	if waitErr != nil {
		return fmt.Errorf("dpkg-deb --fsys-tarfile %s: %w: %s", p.File, waitErr, strings.TrimSpace(stderr.String()))
	}
	ctl, err := exec.CommandContext(ctx, "dpkg-deb", "--info", p.File, "control").Output()
	if err != nil {
		return fmt.Errorf("dpkg-deb --info %s control: %w", p.File, err)
	}
	return f.AddFile(path.Join(StatusDir, p.Name), 0o644, statusRecord(ctl))
}

// statusRecord turns a control file into a dpkg status record: the same fields with a Status
// field after Package, as dpkg writes it.
func statusRecord(ctl []byte) []byte {
	var b bytes.Buffer
	for line := range strings.Lines(string(ctl)) {
		b.WriteString(line)
		if strings.HasPrefix(line, "Package: ") {
			b.WriteString("Status: install ok installed\n")
		}
	}
	if !bytes.HasSuffix(b.Bytes(), []byte("\n")) {
		b.WriteByte('\n')
	}
	return b.Bytes()
}

// AddCABundle writes CABundle from the certificates the ca-certificates package put under
// usr/share/ca-certificates: each one, in path order, as update-ca-certificates concatenates
// them with Debian's default configuration (every certificate enabled). It returns how many
// certificates the bundle holds.
func AddCABundle(f *image.Files) (int, error) {
	var bundle bytes.Buffer
	n := 0
	for _, p := range f.Paths() {
		if !strings.HasPrefix(p, "usr/share/ca-certificates/") || !strings.HasSuffix(p, ".crt") {
			continue
		}
		e, _ := f.Lookup(p)
		data, err := e.Content()
		if err != nil {
			return 0, err
		}
		block, rest := pem.Decode(data)
		if block == nil || block.Type != "CERTIFICATE" || len(bytes.TrimSpace(rest)) != 0 {
			return 0, fmt.Errorf("%s is not one PEM certificate", p)
		}
		if _, err := x509.ParseCertificate(block.Bytes); err != nil {
			return 0, fmt.Errorf("%s: %w", p, err)
		}
		bundle.Write(data)
		if !bytes.HasSuffix(data, []byte("\n")) {
			bundle.WriteByte('\n')
		}
		n++
	}
	if n == 0 {
		return 0, fmt.Errorf("no certificate under usr/share/ca-certificates: is the ca-certificates package in the layer?")
	}
	return n, f.AddFile(CABundle, 0o644, bundle.Bytes())
}
