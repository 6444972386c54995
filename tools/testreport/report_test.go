package testreport_test

import (
	"bytes"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/outpost-dev/terraform-provider-outpost/tools/testreport"
)

// goTestJSON runs the real `go test -json` on the fixture module in testdata (its tests pass,
// skip and fail on purpose) and returns the event stream.
func goTestJSON(t *testing.T, args ...string) []byte {
	t.Helper()
	cmd := exec.CommandContext(t.Context(), "go", append([]string{"test", "-json", "-count=1"}, args...)...)
	cmd.Dir = "testdata/fixture"
	cmd.Env = append(os.Environ(), "GOFLAGS=", "GOWORK=off", "FIXTURE_HELPER=")
	var stdout bytes.Buffer
	cmd.Stdout = &stdout
	_ = cmd.Run() // fails because the fixture fails; the events are what matters
	if stdout.Len() == 0 {
		t.Fatalf("go test -json %v printed nothing", args)
	}
	return stdout.Bytes()
}

func TestReportOfAFailingRun(t *testing.T) {
	t.Parallel()
	var out bytes.Buffer
	sum, ok, err := testreport.Run(bytes.NewReader(goTestJSON(t, ".")), &out, testreport.Options{})
	if err != nil {
		t.Fatal(err)
	}
	report := out.String()
	t.Logf("report:\n%s", report)
	if ok {
		t.Error("a run with a failed test passed")
	}
	if sum.Passed != 1 || sum.Failed != 2 || sum.Skipped != 3 {
		t.Errorf("counted %d passed, %d failed, %d skipped; want 1, 2 (TestFails and its subtest), 3", sum.Passed, sum.Failed, sum.Skipped)
	}
	for _, want := range []string{
		"what the failing subtest saw", "want 1, got 2", "--- FAIL: TestFails/sub", "FAIL\tfixture",
		// The two skips with one reason (a two-line message is joined) are counted together.
		"     2  the tool is not installed; set TOOL=path\n        in fixture\n",
		"     1  a helper process, not a test\n",
		"\ntests: 1 passed, 2 failed, 3 skipped\n",
	} {
		if !strings.Contains(report, want) {
			t.Errorf("the report lacks %q", want)
		}
	}
	for _, unwanted := range []string{"noise a passing test logs", "looking for the tool", "=== RUN"} {
		if strings.Contains(report, unwanted) {
			t.Errorf("the report shows %q, which only a failed test's output should", unwanted)
		}
	}
	if !strings.HasSuffix(report, "tests: 1 passed, 2 failed, 3 skipped\n") {
		t.Error("the closing line is not the last line")
	}
}

func TestStrictModeRefusesSkips(t *testing.T) {
	t.Parallel()
	events := goTestJSON(t, "-run", "TestPasses|TestSkipsForATool|TestHelperProcess", ".")
	var out bytes.Buffer
	_, ok, err := testreport.Run(bytes.NewReader(events), &out, testreport.Options{})
	if err != nil || !ok {
		t.Fatalf("a run without failures failed (err %v):\n%s", err, out.String())
	}
	out.Reset()
	_, ok, err = testreport.Run(bytes.NewReader(events), &out, testreport.Options{Strict: true, ListSkips: true})
	if err != nil {
		t.Fatal(err)
	}
	report := out.String()
	t.Logf("strict report:\n%s", report)
	if ok {
		t.Error("strict mode passed a run with a skipped test")
	}
	if !strings.Contains(report, "and it skipped 1:") || !strings.Contains(report, "fixture TestSkipsForATool: the tool is not installed; set TOOL=path") {
		t.Error("strict mode does not name the skipped test and its reason")
	}
	if strings.Contains(report, "fixture TestHelperProcess:") {
		t.Error("strict mode refused the skip of a helper process")
	}
	if !strings.Contains(report, "        - fixture TestSkipsForATool\n") {
		t.Error("ListSkips does not list the skipped test")
	}
}

func TestBuildFailureIsReported(t *testing.T) {
	t.Parallel()
	var out bytes.Buffer
	stream := append([]byte("go: a line that is not JSON\n"), goTestJSON(t, "./broken")...)
	_, ok, err := testreport.Run(bytes.NewReader(stream), &out, testreport.Options{})
	if err != nil {
		t.Fatal(err)
	}
	report := out.String()
	t.Logf("report:\n%s", report)
	if ok {
		t.Error("a run whose package did not build passed")
	}
	for _, want := range []string{"go: a line that is not JSON\n", "undefined: undefinedFunction", "failed packages:\n  fixture/broken\n"} {
		if !strings.Contains(report, want) {
			t.Errorf("the report lacks %q", want)
		}
	}
}

// TestSlowestTests: the summary names the longest passed top-level tests, longest first; a
// subtest is part of its parent's time and a failed test is reported as a failure instead.
func TestSlowestTests(t *testing.T) {
	t.Parallel()
	events := strings.Join([]string{
		`{"Action":"pass","Package":"m/a","Test":"TestA/sub","Elapsed":2.0}`,
		`{"Action":"pass","Package":"m/a","Test":"TestA","Elapsed":2.5}`,
		`{"Action":"pass","Package":"m/b","Test":"TestB","Elapsed":7.1}`,
		`{"Action":"pass","Package":"m/b","Test":"TestQuick","Elapsed":0.1}`,
		`{"Action":"fail","Package":"m/b","Test":"TestC","Elapsed":9}`,
	}, "\n")
	var out bytes.Buffer
	sum, _, err := testreport.Run(strings.NewReader(events), &out, testreport.Options{Slowest: 2, ModulePath: "m"})
	if err != nil {
		t.Fatal(err)
	}
	want := []testreport.Timing{{Package: "m/b", Test: "TestB", Seconds: 7.1}, {Package: "m/a", Test: "TestA", Seconds: 2.5}}
	if len(sum.Slowest) != 2 || sum.Slowest[0] != want[0] || sum.Slowest[1] != want[1] {
		t.Errorf("slowest %+v, want %+v", sum.Slowest, want)
	}
	if !strings.Contains(out.String(), "slowest tests (passed, subtests included):\n      7.1s  b TestB\n      2.5s  a TestA\n") {
		t.Errorf("the report lacks the slowest tests:\n%s", out.String())
	}
}
