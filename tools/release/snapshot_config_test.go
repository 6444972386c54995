package release

import (
	"archive/zip"
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/yaml"
)

// The release configuration cut down for a snapshot keeps what it is told and the rest as is.
func TestSnapshotConfigCutsBuildsToTargets(t *testing.T) {
	in, err := os.ReadFile(filepath.Join("..", "..", ".goreleaser.yml"))
	if err != nil {
		t.Fatal(err)
	}
	out, err := SnapshotConfig(in, []string{"linux_amd64"}, []string{"provider", "agent"})
	if err != nil {
		t.Fatal(err)
	}
	var cfg struct {
		Builds []struct {
			ID      string   `json:"id"`
			Targets []string `json:"targets"`
			Goos    []string `json:"goos"`
			LDFlags []string `json:"ldflags"`
		} `json:"builds"`
		Archives []struct {
			ID string `json:"id"`
		} `json:"archives"`
		Env    []string `json:"env"`
		Before struct {
			Hooks []string `json:"hooks"`
		} `json:"before"`
	}
	if err := yaml.Unmarshal(out, &cfg); err != nil {
		t.Fatal(err)
	}
	var ids, archives []string
	for _, b := range cfg.Builds {
		ids = append(ids, b.ID)
		if !slices.Equal(b.Targets, []string{"linux_amd64"}) || b.Goos != nil || len(b.LDFlags) == 0 {
			t.Errorf("build %s: targets %v, goos %v, ldflags %v; want linux_amd64 only and the ldflags kept", b.ID, b.Targets, b.Goos, b.LDFlags)
		}
	}
	for _, a := range cfg.Archives {
		archives = append(archives, a.ID)
	}
	if !slices.Equal(ids, []string{"provider", "agent"}) || !slices.Equal(archives, []string{"provider", "agent"}) {
		t.Errorf("builds %v and archives %v, want provider and agent", ids, archives)
	}
	if !slices.Contains(cfg.Env, ImagePlatformsEnv+"=linux/amd64") || len(cfg.Before.Hooks) < 3 {
		t.Errorf("env %v, hooks %v: want the images for linux/amd64 and the hooks kept", cfg.Env, cfg.Before.Hooks)
	}
	if _, err := SnapshotConfig(in, []string{"darwin_arm64"}, nil); err == nil {
		t.Error("a snapshot without a Linux target (no images) was accepted")
	}
	if _, err := SnapshotConfig(in, []string{"linux_amd64"}, []string{"nosuch"}); err == nil {
		t.Error("an unknown build id was accepted")
	}
}

// programPackage is a small program of Outpost's root module.
const programPackage = ModulePath + "/internal/testbed/cmd/testbed-pod"

// The bill of materials of an archive holding a Go program of Outpost's root module (the test
// bed's small testbed-pod; this test binary belongs to the tools module) lists the program, with
// the release version for Outpost's module, and the Go standard library it was built with.
func TestArchiveSBOMListsTheProgramAndItsModules(t *testing.T) {
	exe := filepath.Join(t.TempDir(), "program")
	if out, err := exec.CommandContext(t.Context(), "go", "build", "-o", exe, programPackage).CombinedOutput(); err != nil {
		t.Fatalf("go build %s: %v\n%s", programPackage, err, out)
	}
	data, err := os.ReadFile(exe)
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(t.TempDir(), "outpost_1.2.3_linux_amd64.zip")
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	w, _ := zw.Create("outpost")
	_, _ = w.Write(data)
	r, _ := zw.Create("README.md")
	_, _ = r.Write([]byte("not a program"))
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	var doc bytes.Buffer
	if err := ArchiveSBOM(p, "1.2.3", time.Unix(0, 0), &doc); err != nil {
		t.Fatal(err)
	}
	var d Document
	if err := json.Unmarshal(doc.Bytes(), &d); err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, pkg := range d.Packages {
		names = append(names, pkg.Name+"@"+pkg.VersionInfo)
	}
	joined := strings.Join(names, " ")
	for _, want := range []string{"outpost_1.2.3_linux_amd64.zip@1.2.3", programPackage + "@1.2.3", "stdlib@go1."} {
		if !strings.Contains(joined, want) {
			t.Errorf("the document lists no %s: %s", want, joined)
		}
	}
	if d.SPDXVersion != "SPDX-2.3" || d.CreationInfo.Created != "1970-01-01T00:00:00Z" {
		t.Errorf("document header %s %+v", d.SPDXVersion, d.CreationInfo)
	}
	empty := filepath.Join(t.TempDir(), "empty.zip")
	zw2 := zip.NewWriter(&buf)
	buf.Reset()
	_ = zw2.Close()
	_ = os.WriteFile(empty, buf.Bytes(), 0o644)
	if err := ArchiveSBOM(empty, "1.2.3", time.Now(), &doc); err == nil {
		t.Error("an archive without a program got a bill of materials")
	}
}
