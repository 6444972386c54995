package orchestratortest

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"slices"
	"testing"
)

// TarGz packs files (name → content) into the gzip-compressed tar of an inline deployment source
// (api.InlineSource.ArchiveTarGz), in name order so the same files give the same bytes.
func TarGz(t testing.TB, files map[string]string) []byte {
	t.Helper()
	var buf bytes.Buffer
	gz := gzip.NewWriter(&buf)
	tw := tar.NewWriter(gz)
	names := make([]string, 0, len(files))
	for n := range files {
		names = append(names, n)
	}
	slices.Sort(names)
	for _, n := range names {
		if err := tw.WriteHeader(&tar.Header{Name: n, Mode: 0o644, Size: int64(len(files[n])), Typeflag: tar.TypeReg}); err != nil {
			t.Fatalf("orchestratortest: archive %s: %v", n, err)
		}
		if _, err := tw.Write([]byte(files[n])); err != nil {
			t.Fatalf("orchestratortest: archive %s: %v", n, err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatalf("orchestratortest: archive: %v", err)
	}
	if err := gz.Close(); err != nil {
		t.Fatalf("orchestratortest: archive: %v", err)
	}
	return buf.Bytes()
}
