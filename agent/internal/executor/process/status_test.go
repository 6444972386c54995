package process

import "testing"

// TestIsWrapperOf: the wrapper of the attempt is recognised by its command line, a recycled pid
// (another program, or the wrapper of another attempt) is not, and a process caught inside
// execve (no command line yet) is taken for alive rather than reported lost.
func TestIsWrapperOf(t *testing.T) {
	const dir = "/work/dep-abc-1"
	for _, tc := range []struct {
		name    string
		cmdline string
		want    bool
	}{
		{"the attempt's wrapper", "/bin/outpost-agent\x00" + WrapperCommand + "\x00" + dir + "\x00--\x00/bin/outpost-agent\x00job\x00", true},
		{"inside execve", "", true},
		{"another program", "/usr/bin/sleep\x0060\x00", false},
		{"another attempt's wrapper", "/bin/outpost-agent\x00" + WrapperCommand + "\x00/work/dep-xyz-1\x00--\x00job\x00", false},
	} {
		if got := isWrapperOf([]byte(tc.cmdline), dir); got != tc.want {
			t.Errorf("%s: isWrapperOf = %v, want %v", tc.name, got, tc.want)
		}
	}
}
