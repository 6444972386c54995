package main

import (
	"bytes"
	"context"
	"os"
	"strings"
	"testing"
)

// The build itself is tested in tools/image/recipe; these check that bad input is refused
// before any work, with a message that says what to fix.
func TestRunRefusesBadInputEarly(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--platforms", "linux/s390x"}, "platform linux/s390x is not supported"},
		{[]string{"--platforms", "linux"}, "want os/arch"},
		{[]string{"--version", "not a tag"}, "not a valid image reference"},
		{[]string{"--registry", "UPPER/case"}, "not a valid image reference"},
		{[]string{"extra"}, "unexpected arguments"},
	} {
		out := t.TempDir()
		var stdout, stderr bytes.Buffer
		err := run(context.Background(), append(c.args, "--out", out, "--cache", t.TempDir()), func(string) string { return "" }, &stdout, &stderr)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: error %v, want one saying %q", c.args, err, c.want)
		}
		if entries, _ := os.ReadDir(out); len(entries) != 0 {
			t.Errorf("%v: wrote %v before refusing", c.args, entries)
		}
	}
}
