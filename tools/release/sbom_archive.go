package release

import (
	"archive/tar"
	"archive/zip"
	"bufio"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// maxProgramSize bounds what is read of one file of an archive to look for Go build information.
const maxProgramSize = 1 << 30

// ArchiveSBOM writes the SPDX bill of materials of a release archive (.zip, .tar.gz or .tgz) to
// w: the archive, each Go program in it, and the modules each program was built from, as the Go
// build information in the programs records them. Programs built from Outpost's module take
// version (the go command records no release version of its own). It fails when the archive
// holds no Go program: a bill of materials of nothing is a broken release.
func ArchiveSBOM(path, version string, created time.Time, w io.Writer) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	name := filepath.Base(path)
	b, root := newBOM(name, sha256Hex(data), created, Package{
		Name: name, VersionInfo: version, PrimaryPurpose: "ARCHIVE", FilesAnalyzed: false,
		Checksums: []Checksum{{Algorithm: "SHA256", Value: sha256Hex(data)}},
	})
	versions := map[string]string{ModulePath: version}
	found := 0
	each := func(entry string, r io.Reader) error {
		br := bufio.NewReader(r)
		head, _ := br.Peek(4)
		if !isExecutable(head) {
			return nil
		}
		content, err := io.ReadAll(io.LimitReader(br, maxProgramSize))
		if err != nil {
			return fmt.Errorf("%s: %w", entry, err)
		}
		if p, ok := readProgram(entry, content); ok {
			b.addProgram(root, p, versions)
			found++
		}
		return nil
	}
	switch {
	case strings.HasSuffix(name, ".zip"):
		err = eachZipFile(path, each)
	case strings.HasSuffix(name, ".tar.gz"), strings.HasSuffix(name, ".tgz"):
		err = eachTarGzFile(path, each)
	default:
		return fmt.Errorf("%s: not a .zip, .tar.gz or .tgz archive", path)
	}
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	if found == 0 {
		return fmt.Errorf("%s holds no Go program: nothing to list in its bill of materials", path)
	}
	return b.write(w)
}

func eachZipFile(path string, fn func(string, io.Reader) error) error {
	zr, err := zip.OpenReader(path)
	if err != nil {
		return err
	}
	defer zr.Close()
	for _, f := range zr.File {
		if f.FileInfo().IsDir() {
			continue
		}
		rc, err := f.Open()
		if err != nil {
			return err
		}
		err = fn(f.Name, rc)
		rc.Close()
		if err != nil {
			return err
		}
	}
	return nil
}

func eachTarGzFile(path string, fn func(string, io.Reader) error) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	gz, err := gzip.NewReader(f)
	if err != nil {
		return err
	}
	tr := tar.NewReader(gz)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		if h.Typeflag != tar.TypeReg {
			continue
		}
		if err := fn(h.Name, tr); err != nil {
			return err
		}
	}
}
