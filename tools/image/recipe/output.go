package recipe

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
)

// SummaryName is the JSON file beside the archives that lists what was built: names,
// references, digests, sizes and the Debian packages of each platform. The release and the test
// bed read it rather than recomputing digests.
const SummaryName = "images.json"

// countingWriter counts the bytes written through it.
type countingWriter struct {
	w io.Writer
	n int64
}

func (c *countingWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

// writeFileAtomic writes a file through a temporary name in the same directory and renames it
// into place, so a reader never sees half an archive and a failed build leaves the old one.
func writeFileAtomic(p string, write func(io.Writer) error) (int64, error) {
	tmp, err := os.CreateTemp(filepath.Dir(p), "."+filepath.Base(p)+".*")
	if err != nil {
		return 0, err
	}
	defer func() { _ = os.Remove(tmp.Name()) }()
	bw := bufio.NewWriterSize(tmp, 1<<20)
	cw := &countingWriter{w: bw}
	if err := write(cw); err != nil {
		_ = tmp.Close()
		return 0, err
	}
	if err := bw.Flush(); err != nil {
		_ = tmp.Close()
		return 0, err
	}
	if err := tmp.Chmod(0o644); err != nil {
		_ = tmp.Close()
		return 0, err
	}
	if err := tmp.Close(); err != nil {
		return 0, err
	}
	return cw.n, os.Rename(tmp.Name(), p)
}

// writeSummary writes SummaryName; archives are named relative to it, so the directory can move.
func writeSummary(dir string, built []Built) error {
	rel := make([]Built, len(built))
	for i, b := range built {
		rel[i] = b
		rel[i].Archive = filepath.Base(b.Archive)
	}
	b, err := json.MarshalIndent(struct {
		Images []Built `json:"images"`
	}{rel}, "", "  ")
	if err != nil {
		return err
	}
	_, err = writeFileAtomic(filepath.Join(dir, SummaryName), func(w io.Writer) error {
		_, err := fmt.Fprintf(w, "%s\n", b)
		return err
	})
	return err
}
