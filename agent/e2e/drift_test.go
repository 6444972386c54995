package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/outpost-dev/terraform-provider-outpost/internal/api"
	"github.com/outpost-dev/terraform-provider-outpost/internal/client"
	"github.com/outpost-dev/terraform-provider-outpost/internal/orchestrator/orchestratortest"
	"github.com/outpost-dev/terraform-provider-outpost/internal/pgtest"
	"github.com/outpost-dev/terraform-provider-outpost/internal/porttest"
	"github.com/outpost-dev/terraform-provider-outpost/internal/testbed"
)

// driftConfig writes one file with local_file: the infrastructure a test can change outside
// Terraform by editing the file.
const driftConfig = `
variable "path" { type = string }
variable "content" { type = string }
resource "local_file" "f" {
  filename = var.path
  content  = var.content
}
`

// localProviderVersion is the hashicorp/local release the Go module proxy serves with its
// sources (the v2 releases are not served as a module).
const localProviderVersion = "1.4.0"

var (
	localProviderOnce sync.Once
	localProviderDir  string
	localProviderErr  error
)

// localProviderMirror builds hashicorp/local from its module sources once into the user's
// cache and returns a filesystem mirror holding it under both registry hosts, for a CLI
// configuration's provider_installation (no registry is reachable from the machines).
func localProviderMirror(t testing.TB) string {
	t.Helper()
	localProviderOnce.Do(func() {
		cache, err := os.UserCacheDir()
		if err != nil {
			localProviderErr = err
			return
		}
		base := filepath.Join(cache, "outpost", "tools", "terraform-provider-local-v"+localProviderVersion)
		bin := filepath.Join(base, "terraform-provider-local_v"+localProviderVersion)
		if _, err := os.Stat(bin); err != nil {
			localProviderErr = buildLocalProvider(base, bin)
			if localProviderErr != nil {
				return
			}
		}
		localProviderDir = filepath.Join(base, "mirror")
		for _, host := range []string{"registry.terraform.io", "registry.opentofu.org"} {
			dir := filepath.Join(localProviderDir, host, "hashicorp", "local", localProviderVersion, "linux_amd64")
			if err := os.MkdirAll(dir, 0o755); err != nil {
				localProviderErr = err
				return
			}
			link := filepath.Join(dir, filepath.Base(bin))
			if _, err := os.Lstat(link); err != nil {
				if err := os.Symlink(bin, link); err != nil && !os.IsExist(err) {
					localProviderErr = err
					return
				}
			}
		}
	})
	if localProviderErr != nil {
		t.Fatalf("build hashicorp/local %s for the drift test: %v", localProviderVersion, localProviderErr)
	}
	return localProviderDir
}

// buildLocalProvider downloads the provider's module (its zip holds no vendored sources) and
// builds it outside the workspace with its own go.mod.
func buildLocalProvider(base, bin string) error {
	ctx := context.Background()
	out, err := exec.CommandContext(ctx, "go", "mod", "download", "-json", "github.com/hashicorp/terraform-provider-local@v"+localProviderVersion).Output()
	if err != nil {
		return fmt.Errorf("go mod download: %w", err)
	}
	var mod struct{ Dir string }
	if err := json.Unmarshal(out, &mod); err != nil || mod.Dir == "" {
		return fmt.Errorf("go mod download answered %s: %w", out, err)
	}
	src := filepath.Join(base, "src")
	if err := os.RemoveAll(src); err != nil {
		return err
	}
	if err := os.CopyFS(src, os.DirFS(mod.Dir)); err != nil {
		return fmt.Errorf("copy the module: %w", err)
	}
	if err := os.RemoveAll(filepath.Join(src, "vendor")); err != nil {
		return err
	}
	if err := os.Chmod(filepath.Join(src, "go.mod"), 0o644); err != nil {
		return err
	}
	tmp := fmt.Sprintf("%s.%d", bin, os.Getpid())
	cmd := exec.CommandContext(ctx, "go", "build", "-o", tmp, ".")
	cmd.Dir = src
	cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=mod", "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go build: %w\n%s", err, out)
	}
	return os.Rename(tmp, bin)
}

// TestDriftFoundOnScheduleAcrossReplicas runs the drift flow with the real CLIs on three
// orchestrator replicas over one PostgreSQL database, each sweeping every 200 ms with the real
// clock, and an agent with the process executor: an apply writes a file with local_file; a
// schedule every 5 s checks it (no drift); the test edits the file outside Terraform; a check
// marks the state key drifted with local_file.f in the summary (API, schedule, metrics); an
// apply puts the file back; a later check clears the mark. No two checks of the schedule were
// queued in one period.
func TestDriftFoundOnScheduleAcrossReplicas(t *testing.T) {
	t.Parallel()
	for name, path := range map[string]string{"terraform": "/usr/local/bin/terraform", "tofu": os.Getenv("OUTPOST_TOFU")} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			if path == "" {
				t.Skip("OUTPOST_TOFU names no tofu binary (make test sets it; scripts/tools.sh builds it)")
			}
			driftFlow(t, path)
		})
	}
}

func driftFlow(t *testing.T, cliPath string) {
	mirror := localProviderMirror(t)
	pg, err := pgtest.Start(t.Context())
	if err != nil {
		t.Fatalf("PostgreSQL for the replicas: %v", err)
	}
	t.Cleanup(pg.Stop)
	dbURL, err := pg.Schema(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	first := orchestratortest.Start(t, orchestratortest.WithDatabase(dbURL))
	reps := []*orchestratortest.Instance{first}
	for range 2 {
		reps = append(reps, orchestratortest.Start(t, orchestratortest.WithDatabase(dbURL), orchestratortest.WithData(t.TempDir(), first.AdminToken)))
	}
	admin, err := client.NewAdminClient(first.URL, testOrg, first.AdminToken)
	if err != nil {
		t.Fatal(err)
	}
	e := newEnvOn(t, first.URL, admin, "", nil, 2)

	tfrc := filepath.Join(t.TempDir(), "cli.tfrc")
	hosts := `["registry.terraform.io/hashicorp/local", "registry.opentofu.org/hashicorp/local"]`
	if err := os.WriteFile(tfrc, []byte(fmt.Sprintf("provider_installation {\n  filesystem_mirror {\n    path = %q\n    include = %s\n  }\n  direct { exclude = %s }\n}\n", mirror, hosts, hosts)), 0o644); err != nil {
		t.Fatal(err)
	}
	e.agentEnv = append(e.agentEnv, "TF_CLI_CONFIG_FILE="+tfrc)
	stateAddr, healthAddr, workDir := porttest.Addr(t), porttest.Addr(t), t.TempDir()
	e.startAgent("agent-0", "--executor", "process", "--leader-elect=false", "--work-dir", workDir, "--agent-binary", agentBinary(t),
		"--cli", cliPath, "--state-listen", stateAddr, "--state-url", "http://"+stateAddr, "--health-listen", healthAddr)

	ctx := t.Context()
	file := filepath.Join(t.TempDir(), "managed.txt")
	src := api.Source{Inline: &api.InlineSource{ArchiveTarGz: orchestratortest.TarGz(t, map[string]string{"main.tf": driftConfig})}}
	vars := map[string]json.RawMessage{"path": mustRaw(t, file), "content": mustRaw(t, "as configured\n")}
	const key = "apps/file"
	apply := func() {
		t.Helper()
		d, err := e.admin.CreateDeployment(ctx, api.DeploymentInput{RunnerID: e.runnerID, Operation: api.OperationApply, Source: src, Variables: vars, StateKey: key})
		if err != nil {
			t.Fatal(err)
		}
		if got := e.waitTerminal([]string{d.ID}, 3*time.Minute)[d.ID]; got.Status != api.StatusSucceeded {
			logs, _ := e.admin.GetLogs(ctx, d.ID, 0, 1<<20)
			t.Fatalf("apply %s: %s (%s)\n%s", d.ID, got.Status, got.Message, logs.Data)
		}
	}
	apply()
	if b, err := os.ReadFile(file); err != nil || string(b) != "as configured\n" {
		t.Fatalf("after the apply the file holds %q, %v", b, err)
	}

	const period = 5 * time.Second
	sch, err := e.admin.CreateSchedule(ctx, api.ScheduleInput{ID: "file-drift", RunnerID: e.runnerID, Source: src, Variables: vars, StateKey: key, Cron: "*/5 * * * * *"})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("schedule %s: next fire %s", sch.ID, sch.NextFireAt)
	// lastCheck waits for a check queued after since to report, and returns the schedule then.
	lastCheck := func(what string, since time.Time, drifted bool) *api.Schedule {
		t.Helper()
		var got *api.Schedule
		testbed.WaitFor(t, 3*time.Minute, what, func() (bool, string) {
			s, err := e.admin.GetSchedule(ctx, sch.ID)
			if err != nil {
				return false, err.Error()
			}
			got = s
			if c := s.LastCheck; c != nil && c.CheckedAt.After(since) && c.Drifted == drifted {
				return true, ""
			}
			return false, fmt.Sprintf("last check %+v, last message %q", s.LastCheck, s.LastMessage)
		})
		return got
	}
	start := time.Now()
	lastCheck("a first check without drift", start, false)

	if err := os.WriteFile(file, []byte("edited by hand\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	edited := time.Now()
	got := lastCheck("a check to find the edited file", edited, true)
	c := got.LastCheck
	if c.Summary == nil || len(c.Summary.Drift) == 0 || c.Summary.Drift[0].Address != "local_file.f" ||
		len(c.Summary.ResourceChanges) != 1 || c.Summary.ResourceChanges[0].Address != "local_file.f" || c.Summary.ResourceChanges[0].Action != api.PlanCreate {
		t.Fatalf("drift check's summary: %s", mustRaw(t, c.Summary))
	}
	if strings.Contains(string(mustRaw(t, c.Summary)), "as configured") {
		t.Fatalf("the summary carries the file's content: %s", mustRaw(t, c.Summary))
	}
	st, err := e.admin.GetState(ctx, "k8s", key)
	if err != nil || st.Drift == nil || !st.Drift.Drifted || st.Drift.DeploymentID != c.DeploymentID {
		t.Fatalf("state %s after drift: %+v, %v", key, st, err)
	}
	check, err := e.admin.GetDeployment(ctx, c.DeploymentID)
	if err != nil || check.Status != api.StatusSucceeded || !check.DriftCheck || check.ScheduleID != sch.ID {
		t.Fatalf("the check that found drift: %+v, %v (a plan with changes is a drift check's finding, not a failure)", check, err)
	}
	logs, _ := e.admin.GetLogs(ctx, c.DeploymentID, 0, 1<<20)
	if !strings.Contains(string(logs.Data), "-detailed-exitcode") || !strings.Contains(string(logs.Data), "drift check: changes found and reported") {
		t.Errorf("the check's log does not show the detailed exit code and the report:\n%s", logs.Data)
	}
	if n := metric(t, reps[2].URL, `outpost_orchestrator_drifted_states{org="`+testOrg+`"}`); n != 1 {
		t.Errorf("outpost_orchestrator_drifted_states on a replica = %v, want 1", n)
	}
	if b, _ := os.ReadFile(file); string(b) != "edited by hand\n" {
		t.Fatalf("the drift check changed the file: %q", b)
	}

	apply()
	reapplied := time.Now()
	lastCheck("a check after the re-apply to clear the mark", reapplied, false)
	if st, err := e.admin.GetState(ctx, "k8s", key); err != nil || st.Drift != nil {
		t.Fatalf("state %s after the clean check: %+v, %v", key, st, err)
	}

	// Each period queued at most one check, though three replicas swept it.
	var list []api.Deployment
	list, err = e.admin.ListDeployments(ctx, client.DeploymentFilter{RunnerID: e.runnerID})
	if err != nil {
		t.Fatal(err)
	}
	periods := map[time.Time]string{}
	checks := 0
	for _, d := range list {
		if d.ScheduleID != sch.ID {
			continue
		}
		checks++
		p := d.CreatedAt.Truncate(period)
		if other, ok := periods[p]; ok {
			t.Errorf("checks %s and %s were both queued in the period from %s", other, d.ID, p)
		}
		periods[p] = d.ID
	}
	t.Logf("%d checks in %s over 3 replicas (a period whose check still ran queued none)", checks, time.Since(start).Round(time.Second))
	if checks < 3 {
		t.Errorf("%d checks, want at least 3 (clean, drifted, clean)", checks)
	}
}

func mustRaw(t testing.TB, v any) json.RawMessage {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// metric reads one sample of an orchestrator's /metrics; 0 when the series is absent.
func metric(t testing.TB, baseURL, series string) float64 {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, baseURL+"/metrics", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	for line := range strings.SplitSeq(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, series+" "); ok {
			v, err := strconv.ParseFloat(strings.TrimSpace(rest), 64)
			if err != nil {
				t.Fatalf("metric line %q: %v", line, err)
			}
			return v
		}
	}
	return 0
}
