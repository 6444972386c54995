package jobrun

import "testing"

func TestCountNamesTheNumber(t *testing.T) {
	for n, want := range map[int]string{0: "0 files", 1: "1 file", 2: "2 files"} {
		if got := count(n, "file", "files"); got != want {
			t.Errorf("count(%d) = %q, want %q", n, got, want)
		}
	}
}
