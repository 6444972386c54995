package statebackend

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/outpost-dev/terraform-provider-outpost/agent/internal/statestore"
	"github.com/outpost-dev/terraform-provider-outpost/internal/benchtest"
	"github.com/outpost-dev/terraform-provider-outpost/internal/testbed"
)

// BenchmarkStateBackends compares, on the same test bed in one run, the stock `kubernetes`
// backend of the CLI with the Outpost http backend (this handler over the Secret store, with the
// agent's default client settings: 50 QPS, burst 100), for states of 100 KiB, 1 MiB, 5 MiB and
// 20 MiB. It times `state push -force` of a prepared state file (write) and `state pull` (read)
// end to end, as a user or job sees them (CLI start-up included), takes the median of
// OUTPOST_BENCH_REPS runs (default 5), and prints a table with the ratios; a backend that fails
// is shown as failed with the reason. With OUTPOST_TOFU set it also runs OpenTofu.
//
// Run: go test -run '^$' -bench StateBackends -benchtime 1x ./agent/internal/statebackend/
//
// The states are terraform_data resources whose inputs are random hex: that compresses about
// 2:1, less than typical states (ids, ARNs, JSON policies compress 5-10:1), so it is the harder
// case for both backends' gzip and for the stock backend's 1 MiB Secret limit.
func BenchmarkStateBackends(b *testing.B) {
	began := time.Now()
	reps := 5
	if v, err := strconv.Atoi(os.Getenv("OUTPOST_BENCH_REPS")); err == nil && v > 0 {
		reps = v
	}
	cluster := testbed.Shared(b)
	ns := testbed.NewNamespace(b, cluster)

	// The agent's client: default agent QPS/burst, JSON like the agent; OUTPOST_BENCH_PROTOBUF=1
	// switches to protobuf (which halves the cost of large Secrets: no base64 in JSON).
	rc := rest.CopyConfig(cluster.RESTConfig)
	rc.QPS, rc.Burst = 50, 100
	wire := "JSON"
	if os.Getenv("OUTPOST_BENCH_PROTOBUF") == "1" {
		rc.ContentType = "application/vnd.kubernetes.protobuf"
		rc.AcceptContentTypes = "application/vnd.kubernetes.protobuf,application/json"
		wire = "protobuf"
	}
	kc, err := kubernetes.NewForConfig(rc)
	if err != nil {
		b.Fatal(err)
	}
	st := mustStore(statestore.New(kc, ns, statestore.Options{Logger: testLogger()}))
	authz := newTestAuthz()
	authz.add("bench", "pw")
	h := NewHandler(st, authz, testLogger())
	srv := httptest.NewServer(h)
	b.Cleanup(func() { srv.Close(); h.Close() })

	clis := []cli{{"terraform", "terraform"}}
	if p := os.Getenv("OUTPOST_TOFU"); p != "" {
		clis = append(clis, cli{"tofu", p})
	}
	for i := range clis {
		if clis[i].name == "terraform" {
			if p := os.Getenv("TF_ACC_TERRAFORM_PATH"); p != "" && !strings.Contains(p, "tofu") {
				clis[i].path = p
			}
		}
	}
	sizes := []int{100 << 10, 1 << 20, 5 << 20, 20 << 20}

	var rows []stateRow
	dir := b.TempDir()
	lineage := "8c1c3f0e-0b6a-4c39-9d55-6f1f0d1b2a77"

	run := func(w *workdir, file string, size int) result {
		var pushes, pulls []time.Duration
		for r := 0; r < repsFor(size, reps); r++ {
			must(b, os.WriteFile(file, benchState(size, r+1, lineage), 0o600))
			start := time.Now()
			if out, err := w.run("state", "push", "-force", file); err != nil {
				return result{err: firstErrorLine(out, err)}
			}
			pushes = append(pushes, time.Since(start))
			start = time.Now()
			out, err := w.stdout("state", "pull")
			if err != nil {
				return result{err: firstErrorLine(err.Error(), err)}
			}
			pulls = append(pulls, time.Since(start))
			// (Terraform gives a state pushed into an empty remote state a new lineage, so only
			// the shape and size are compared.)
			var got struct{ Resources []any }
			if json.Unmarshal(out, &got) != nil || len(got.Resources) != 1 || len(out) < size*9/10 || len(out) > size*11/10 {
				return result{err: fmt.Sprintf("pulled %d bytes: not the pushed state", len(out))}
			}
		}
		return result{push: median(pushes), pull: median(pulls)}
	}

	for i := 0; i < b.N; i++ {
		rows = rows[:0]
		for _, c := range clis {
			for _, size := range sizes {
				label := sizeLabel(size)
				file := filepath.Join(dir, c.name+"-"+label+".tfstate")
				r := stateRow{cli: c.name, size: size, reps: repsFor(size, reps)}
				benchtest.Progress("state backends: %s, %s, each backend %d time(s)", c.name, label, r.reps)

				stockDir := newWorkdirWith(b, c, fmt.Sprintf(`terraform {
  backend "kubernetes" {
    secret_suffix = %q
    namespace     = %q
    config_path   = %q
  }
}
`, strings.ToLower("bench-"+c.name+"-"+label), ns, cluster.Kubeconfig), "")
				r.stock = run(stockDir, file, size)

				key := "bench/" + c.name + "/" + label
				outpostDir := newWorkdirWith(b, c, fmt.Sprintf(backendHTTP, srv.URL+PathPrefix+strings.ReplaceAll(key, "/", "%2F")), "",
					"TF_HTTP_USERNAME=bench", "TF_HTTP_PASSWORD=pw")
				r.outpost = run(outpostDir, file, size)
				rows = append(rows, r)
				if r.outpost.err == "" {
					b.ReportMetric(float64(r.outpost.push.Milliseconds()), c.name+"-outpost-push-"+label+"-ms")
					b.ReportMetric(float64(r.outpost.pull.Milliseconds()), c.name+"-outpost-pull-"+label+"-ms")
				}
				if r.stock.err == "" {
					b.ReportMetric(float64(r.stock.push.Milliseconds()), c.name+"-stock-push-"+label+"-ms")
					b.ReportMetric(float64(r.stock.pull.Milliseconds()), c.name+"-stock-pull-"+label+"-ms")
				}
			}
		}
	}

	var sb strings.Builder
	fmt.Fprintf(&sb, "\nState backends, median of %d runs each (states of %s and more: %d), CLI wall time (start-up included); ratio = stock / outpost (>1: Outpost faster); agent client %s\n", reps, sizeLabel(onceFrom), repsFor(onceFrom, reps), wire)
	fmt.Fprintf(&sb, "%-9s %-8s | %-14s %-14s %-7s | %-14s %-14s %-7s\n", "cli", "state", "stock push", "outpost push", "ratio", "stock pull", "outpost pull", "ratio")
	fmt.Fprintf(&sb, "%s\n", strings.Repeat("-", 100))
	var failures []string
	for _, r := range rows {
		cell := func(x result) string {
			if x.err != "" {
				return "FAILED"
			}
			return x.push.Round(time.Millisecond).String()
		}
		cellPull := func(x result) string {
			if x.err != "" {
				return "FAILED"
			}
			return x.pull.Round(time.Millisecond).String()
		}
		ratio := func(s, o time.Duration, se, oe string) string {
			if se != "" || oe != "" || o == 0 {
				return "-"
			}
			return fmt.Sprintf("%.2f", float64(s)/float64(o))
		}
		fmt.Fprintf(&sb, "%-9s %-8s | %-14s %-14s %-7s | %-14s %-14s %-7s\n", r.cli, sizeLabel(r.size),
			cell(r.stock), cell(r.outpost), ratio(r.stock.push, r.outpost.push, r.stock.err, r.outpost.err),
			cellPull(r.stock), cellPull(r.outpost), ratio(r.stock.pull, r.outpost.pull, r.stock.err, r.outpost.err))
		if r.stock.err != "" {
			failures = append(failures, fmt.Sprintf("  stock kubernetes backend (%s, %s) failed: %s", r.cli, sizeLabel(r.size), r.stock.err))
		}
		if r.outpost.err != "" {
			failures = append(failures, fmt.Sprintf("  OUTPOST backend (%s, %s) failed: %s", r.cli, sizeLabel(r.size), r.outpost.err))
		}
	}
	if len(failures) > 0 {
		fmt.Fprintf(&sb, "\n%s\n", strings.Join(failures, "\n"))
	}
	if benchtest.Dir() == "" { // make bench prints one table of every benchmark at the end
		fmt.Fprint(os.Stdout, sb.String())
	}
	if err := benchtest.Write(stateFigures(rows, wire, began)); err != nil {
		b.Error(err)
	}
	for _, r := range rows {
		if r.outpost.err != "" {
			b.Errorf("the Outpost backend failed (%s, %s): %s", r.cli, sizeLabel(r.size), r.outpost.err)
		}
	}
}

// result is one backend's median push and pull of one state size, or why it failed.
type result struct {
	push, pull time.Duration
	err        string
}

// stateRow is one CLI and state size: the stock backend's and Outpost's results.
type stateRow struct {
	cli            string
	size           int
	stock, outpost result
	// reps is how many runs of each backend the row's medians come from.
	reps int
}

// onceFrom is the state size from which each backend is timed once instead of reps times: a
// 20 MiB push and pull take seconds each, more than half of the benchmark's time at three runs. The
// figure's name says it is one run.
const onceFrom = 20 << 20

// repsFor is how many times a state of size is pushed and pulled per backend.
func repsFor(size, reps int) int {
	if size >= onceFrom {
		return 1
	}
	return reps
}

func runsLabel(reps int) string {
	if reps == 1 {
		return "one run"
	}
	return fmt.Sprintf("median of %d", reps)
}

// stateFigures are the rows as the figures of make bench's table: Outpost's push and pull next to
// the stock kubernetes backend's, in milliseconds; a failed side has no figure (a failed Outpost
// side fails the benchmark, a failed stock side is a note).
func stateFigures(rows []stateRow, wire string, began time.Time) benchtest.Results {
	var figs []benchtest.Figure
	for _, r := range rows {
		for _, op := range []struct {
			name           string
			stock, outpost time.Duration
		}{{"push", r.stock.push, r.outpost.push}, {"pull", r.stock.pull, r.outpost.pull}} {
			if r.outpost.err != "" {
				continue
			}
			f := benchtest.Figure{Section: "state backend (" + r.cli + ")", Name: fmt.Sprintf("%s %s, %s", op.name, sizeLabel(r.size), runsLabel(r.reps)),
				Value: benchtest.Ms(op.outpost), Unit: "ms"}
			if r.stock.err == "" {
				f.Floor, f.FloorName = benchtest.Ms(op.stock), "stock kubernetes backend"
			} else {
				f.Note = "the stock kubernetes backend failed: " + r.stock.err
			}
			figs = append(figs, f)
		}
	}
	return benchtest.Results{Benchmark: "state-backends", Started: began, Seconds: time.Since(began).Seconds(), Figures: figs,
		Warmup: fmt.Sprintf("nothing (each figure is the median of its runs, CLI start-up included; states of %s and more run once; agent client %s)", sizeLabel(onceFrom), wire)}
}

// benchState builds a Terraform v4 state of about size bytes: terraform_data instances whose
// input (and its copy in output) is random hex.
func benchState(size, serial int, lineage string) []byte {
	type attrs struct {
		ID              string `json:"id"`
		Input           any    `json:"input"`
		Output          any    `json:"output"`
		TriggersReplace any    `json:"triggers_replace"`
	}
	type instance struct {
		IndexKey            int   `json:"index_key"`
		SchemaVersion       int   `json:"schema_version"`
		Attributes          attrs `json:"attributes"`
		SensitiveAttributes []any `json:"sensitive_attributes"`
	}
	per := min(128<<10, size/4) // hex characters per input (the output repeats it)
	n := max(1, (size+per)/(2*per+400))
	var insts []instance
	for i := range n {
		buf := make([]byte, per/2)
		_, _ = rand.Read(buf)
		v := map[string]string{"value": hex.EncodeToString(buf), "type": "string"}
		id := make([]byte, 16)
		_, _ = rand.Read(id)
		insts = append(insts, instance{IndexKey: i, Attributes: attrs{ID: hex.EncodeToString(id), Input: v, Output: v}, SensitiveAttributes: []any{}})
	}
	doc := map[string]any{
		"version": 4, "terraform_version": "1.11.4", "serial": serial, "lineage": lineage, "outputs": map[string]any{},
		"resources": []any{map[string]any{
			"mode": "managed", "type": "terraform_data", "name": "bench",
			"provider": `provider["terraform.io/builtin/terraform"]`, "instances": insts,
		}},
		"check_results": nil,
	}
	out, err := json.MarshalIndent(doc, "", "  ")
	if err != nil {
		panic(err)
	}
	return append(out, '\n')
}

func sizeLabel(n int) string {
	if n >= 1<<20 {
		return fmt.Sprintf("%dMiB", n>>20)
	}
	return fmt.Sprintf("%dKiB", n>>10)
}

func median(d []time.Duration) time.Duration {
	s := slices.Clone(d)
	slices.Sort(s)
	return s[len(s)/2]
}

var ansi = regexp.MustCompile(`\x1b\[[0-9;]*m`)

// firstErrorLine picks the most telling line of a CLI failure.
func firstErrorLine(out string, err error) string {
	out = ansi.ReplaceAllString(out, "")
	for _, l := range strings.Split(out, "\n") {
		l = strings.TrimSpace(strings.TrimLeft(l, "│╷╵ "))
		if l == "" || strings.HasPrefix(l, "Error: ") && len(l) < 30 {
			continue
		}
		if strings.Contains(l, "Error") || strings.Contains(l, "error") || strings.Contains(l, "Too long") || strings.Contains(l, "too large") {
			if len(l) > 200 {
				l = l[:200] + "…"
			}
			return l
		}
	}
	return err.Error()
}
