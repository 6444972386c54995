package recipe

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/outpost-dev/terraform-provider-outpost/tools/image"
	"github.com/outpost-dev/terraform-provider-outpost/tools/image/imagetest"
)

// These tests build the real images (both platforms), the way `make images` does, with the
// user's cache: cold, that is about 10 minutes on 2 cores (two OpenTofu builds); warm, about 2.

var testDir string // removed after the tests

func TestMain(m *testing.M) {
	imagetest.Main()
	var err error
	if testDir, err = os.MkdirTemp("", "outpost-images-test-"); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := m.Run()
	_ = os.RemoveAll(testDir)
	os.Exit(code)
}

// requireBuildTools fails under CI=true, and skips elsewhere, when the Debian part cannot be
// fetched here.
func requireBuildTools(t *testing.T) {
	t.Helper()
	if testing.Short() {
		t.Skip("builds the images (about 2 minutes warm): skipped under -short (make check); make test runs it")
	}
	var missing []string
	for _, tool := range []string{"apt-get", "apt-cache", "dpkg-deb", "git", "go"} {
		if _, err := exec.LookPath(tool); err != nil {
			missing = append(missing, tool)
		}
	}
	if len(missing) > 0 {
		if os.Getenv("CI") == "true" {
			t.Fatalf("CI=true and the images cannot be built here: %s not found", strings.Join(missing, ", "))
		}
		t.Skipf("the images need %s to build (a Debian or Ubuntu machine); CI=true makes this a failure", strings.Join(missing, ", "))
	}
}

func requireRoot(t *testing.T) {
	t.Helper()
	if err := imagetest.Available(); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("CI=true and this test cannot run: %v", err)
		}
		t.Skip(err)
	}
}

func testOptions(t *testing.T, out string) Options {
	t.Helper()
	root, err := filepath.Abs("../../..")
	if err != nil {
		t.Fatal(err)
	}
	facts, err := DescribeSource(context.Background(), root, func(string) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	platforms := make([]image.Platform, 0, 2)
	for _, p := range []string{"linux/amd64", "linux/arm64"} {
		pl, _ := image.ParsePlatform(p)
		platforms = append(platforms, pl)
	}
	return Options{
		ModuleRoot: root, Registry: "ghcr.io/outpost-dev", Version: "0.0.0-test", Revision: facts.Revision,
		Created: facts.Created, Licenses: "MPL-2.0", TofuVersion: tofuVersion(), Platforms: platforms,
		CacheDir: CacheDir(os.Getenv), OutDir: out, Log: testLog{t},
	}
}

// tofuVersion is the OpenTofu release the rest of the suite uses (the GNUmakefile's).
func tofuVersion() string {
	if v := os.Getenv("TOFU_VERSION"); v != "" {
		return "v" + strings.TrimPrefix(v, "v")
	}
	return "v1.10.6"
}

type testLog struct{ t *testing.T }

func (l testLog) Write(p []byte) (int, error) {
	l.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

var (
	buildOnce  sync.Once
	built      []Built
	buildErr   error
	buildTook  time.Duration
	firstBuild string
)

// build builds the images once for all tests of the package.
func build(t *testing.T) []Built {
	t.Helper()
	requireBuildTools(t)
	buildOnce.Do(func() {
		firstBuild = filepath.Join(testDir, "first")
		start := time.Now()
		built, buildErr = Build(context.Background(), testOptions(t, firstBuild))
		buildTook = time.Since(start)
		t.Logf("built the images in %s", buildTook.Round(time.Second))
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return built
}

func find(t *testing.T, bs []Built, name string) Built {
	t.Helper()
	for _, b := range bs {
		if b.Name == name {
			return b
		}
	}
	t.Fatalf("no %s image was built", name)
	return Built{}
}

func platformImage(t *testing.T, b Built, arch string) v1.Image {
	t.Helper()
	m, err := b.Index().IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range m.Manifests {
		if d.Platform != nil && d.Platform.Architecture == arch {
			img, err := b.Index().Image(d.Digest)
			if err != nil {
				t.Fatal(err)
			}
			return img
		}
	}
	t.Fatalf("%s has no %s image", b.Name, arch)
	return nil
}

func TestImageConfigs(t *testing.T) {
	bs := build(t)
	opts := testOptions(t, "")
	for _, b := range bs {
		if b.Ref != "ghcr.io/outpost-dev/"+b.Name+":0.0.0-test" {
			t.Errorf("ref %s", b.Ref)
		}
		m, err := b.Index().IndexManifest()
		if err != nil {
			t.Fatal(err)
		}
		var plats []string
		for _, d := range m.Manifests {
			plats = append(plats, d.Platform.String())
		}
		if strings.Join(plats, " ") != "linux/amd64 linux/arm64/v8" {
			t.Errorf("%s platforms %v", b.Name, plats)
		}
		if m.Annotations["org.opencontainers.image.source"] != Source || m.Annotations["org.opencontainers.image.version"] != "0.0.0-test" {
			t.Errorf("%s index annotations %v", b.Name, m.Annotations)
		}
		for _, arch := range []string{"amd64", "arm64"} {
			img := platformImage(t, b, arch)
			cf, err := img.ConfigFile()
			if err != nil {
				t.Fatal(err)
			}
			c := cf.Config
			if cf.Architecture != arch || cf.OS != "linux" || !cf.Created.Equal(opts.Created) {
				t.Errorf("%s/%s: config says %s/%s created %v", b.Name, arch, cf.OS, cf.Architecture, cf.Created)
			}
			if c.User != "65532:65532" {
				t.Errorf("%s/%s runs as %q, want 65532:65532", b.Name, arch, c.User)
			}
			wantEnv := []string{envPath, "HOME=/tmp", "SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt"}
			wantEntry := []string{agentPath}
			if b.Name == JobName {
				wantEnv = append(wantEnv, "TMPDIR=/tmp")
				wantEntry = []string{tofuPath}
				if c.WorkingDir != "/tmp" {
					t.Errorf("job image working directory %q, want /tmp", c.WorkingDir)
				}
			}
			for _, e := range wantEnv {
				if !slices.Contains(c.Env, e) {
					t.Errorf("%s/%s env %v lacks %s", b.Name, arch, c.Env, e)
				}
			}
			if !slices.Equal(c.Entrypoint, wantEntry) || len(c.Cmd) != 0 {
				t.Errorf("%s/%s entrypoint %v cmd %v, want %v and none", b.Name, arch, c.Entrypoint, c.Cmd, wantEntry)
			}
			for _, k := range []string{"title", "description", "source", "version", "created"} {
				if c.Labels["org.opencontainers.image."+k] == "" {
					t.Errorf("%s/%s has no %s label", b.Name, arch, k)
				}
			}
			if opts.Revision != "" && c.Labels["org.opencontainers.image.revision"] != opts.Revision {
				t.Errorf("%s/%s revision label %q, want %s", b.Name, arch, c.Labels["org.opencontainers.image.revision"], opts.Revision)
			}
			if lic := c.Labels["org.opencontainers.image.licenses"]; (b.Name == AgentName) != (lic == "MPL-2.0") {
				t.Errorf("%s/%s licenses label %q", b.Name, arch, lic)
			}
			layers, _ := img.Layers()
			if len(cf.History) != len(layers) {
				t.Errorf("%s/%s: %d history entries for %d layers", b.Name, arch, len(cf.History), len(layers))
			}
		}
	}
	// Both images of a platform share their base layer: a node that pulls both stores it once.
	for _, arch := range []string{"amd64", "arm64"} {
		a, _ := platformImage(t, find(t, bs, AgentName), arch).Layers()
		j, _ := platformImage(t, find(t, bs, JobName), arch).Layers()
		ad, _ := a[0].Digest()
		jd, _ := j[0].Digest()
		if ad != jd {
			t.Errorf("%s: agent base layer %s, job base layer %s", arch, ad, jd)
		}
	}
}

// unpack unpacks one platform image into a fresh directory.
func unpack(t *testing.T, b Built, arch string) string {
	t.Helper()
	dir := t.TempDir()
	if err := imagetest.Unpack(platformImage(t, b, arch), dir); err != nil {
		t.Fatal(err)
	}
	return dir
}

// writableTmp is a host directory for the image's /tmp, as the chart's emptyDir.
func writableTmp(t *testing.T) string {
	t.Helper()
	tmp := t.TempDir()
	if err := os.Chmod(tmp, 0o1777); err != nil {
		t.Fatal(err)
	}
	return tmp
}

func runIn(t *testing.T, img v1.Image, rootfs, tmp string, args ...string) string {
	t.Helper()
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	out, _, err := imagetest.Run(context.Background(), imagetest.Spec{
		Rootfs: rootfs, Tmp: tmp, User: cf.Config.User, Env: cf.Config.Env, WorkingDir: cf.Config.WorkingDir, Args: args,
	})
	if err != nil {
		t.Fatal(err)
	}
	return string(out)
}

// checkTree checks what a pod with readOnlyRootFilesystem relies on: the user exists, only
// sticky directories are world-writable, nothing belongs to the non-root user, and nothing is
// setuid or setgid.
func checkTree(t *testing.T, rootfs string) {
	t.Helper()
	passwd, err := os.ReadFile(filepath.Join(rootfs, "etc/passwd"))
	if err != nil || !strings.Contains(string(passwd), fmt.Sprintf("nonroot:x:%d:%d:nonroot:/tmp:", UID, GID)) {
		t.Errorf("/etc/passwd has no nonroot user %d: %q (%v)", UID, passwd, err)
	}
	group, err := os.ReadFile(filepath.Join(rootfs, "etc/group"))
	if err != nil || !strings.Contains(string(group), fmt.Sprintf("nonroot:x:%d:", GID)) {
		t.Errorf("/etc/group has no nonroot group %d: %q (%v)", GID, group, err)
	}
	if fi, err := os.Stat(filepath.Join(rootfs, "tmp")); err != nil || fi.Mode().Perm() != 0o777 || fi.Mode()&os.ModeSticky == 0 {
		t.Errorf("/tmp is %v (%v), want drwxrwxrwt", fi.Mode(), err)
	}
	err = filepath.Walk(rootfs, func(p string, fi os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(rootfs, p)
		mode := fi.Mode()
		if mode&os.ModeSymlink != 0 {
			return nil
		}
		if mode.Perm()&0o002 != 0 && (!mode.IsDir() || mode&os.ModeSticky == 0) {
			t.Errorf("/%s is world-writable (%v)", rel, mode)
		}
		if mode.IsRegular() && mode&(os.ModeSetuid|os.ModeSetgid) != 0 {
			t.Errorf("/%s is setuid or setgid (%v)", rel, mode)
		}
		if st, ok := fi.Sys().(interface{ Uid() uint32 }); ok && st.Uid() == UID {
			t.Errorf("/%s belongs to the non-root user", rel)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// runnable builds the images and unpacks the amd64 image of name for running, after checking
// its tree.
func runnable(t *testing.T, name string) (v1.Image, string) {
	t.Helper()
	bs := build(t)
	requireRoot(t)
	if runtime.GOARCH != "amd64" {
		t.Skip("runs the amd64 images; this machine is " + runtime.GOARCH)
	}
	b := find(t, bs, name)
	rootfs := unpack(t, b, "amd64")
	checkTree(t, rootfs)
	return platformImage(t, b, "amd64"), rootfs
}

func TestAgentImageRuns(t *testing.T) {
	img, rootfs := runnable(t, AgentName)
	// The image's version is stamped into the binary (internal/version), not left at "dev".
	out := runIn(t, img, rootfs, writableTmp(t), "outpost-agent", "version")
	if out != "outpost-agent 0.0.0-test\n" {
		t.Errorf("outpost-agent version printed %q, want the image's version 0.0.0-test", out)
	}
	if _, err := os.Stat(filepath.Join(rootfs, "etc/ssl/certs/ca-certificates.crt")); err != nil {
		t.Error(err)
	}
}

func TestJobImageRunsTofuAndGit(t *testing.T) {
	img, rootfs := runnable(t, JobName)
	tmp := writableTmp(t)

	if out := runIn(t, img, rootfs, tmp, "tofu", "version"); !strings.HasPrefix(out, "OpenTofu "+tofuVersion()+"\n") {
		t.Errorf("tofu version printed %q", out)
	}
	if out := runIn(t, img, rootfs, tmp, "git", "--version"); !strings.HasPrefix(out, "git version 2.") {
		t.Errorf("git --version printed %q", out)
	}
	if out := runIn(t, img, rootfs, tmp, "sh", "-c", "echo $HOME $TMPDIR"); out != "/tmp /tmp\n" {
		t.Errorf("sh printed %q", out)
	}

	// A module in a bare repository, made on the host, owned by the image's user as a volume
	// would be, and cloned inside the image over file:// (git runs git-upload-pack through
	// /bin/sh for it).
	repo := filepath.Join(tmp, "modules.git")
	work := filepath.Join(t.TempDir(), "work")
	hostGit := func(dir string, args ...string) {
		t.Helper()
		cmd := exec.CommandContext(t.Context(), "git", args...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@example.com",
			"GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@example.com", "GIT_CONFIG_NOSYSTEM=1", "HOME="+dir)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
	}
	if err := os.MkdirAll(work, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(work, "main.tf"), []byte("output \"greeting\" {\n  value = \"hello from git\"\n}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	hostGit(work, "init", "-q", "-b", "main")
	hostGit(work, "add", ".")
	hostGit(work, "commit", "-q", "-m", "module")
	hostGit(work, "clone", "-q", "--bare", work, repo)
	if out, err := exec.CommandContext(t.Context(), "chown", "-R", fmt.Sprintf("%d:%d", UID, GID), repo).CombinedOutput(); err != nil {
		t.Fatalf("chown: %v\n%s", err, out)
	}
	runIn(t, img, rootfs, tmp, "git", "clone", "-q", "file:///tmp/modules.git", "/tmp/clone")
	if b, err := os.ReadFile(filepath.Join(tmp, "clone", "main.tf")); err != nil || !strings.Contains(string(b), "hello from git") {
		t.Errorf("the clone inside the image has main.tf %q (%v)", b, err)
	}

	// OpenTofu fetching that module through git, as a job would, and applying.
	root := filepath.Join(tmp, "root")
	if err := os.Mkdir(root, 0o755); err != nil {
		t.Fatal(err)
	}
	cfg := "module \"m\" {\n  source = \"git::file:///tmp/modules.git?ref=main\"\n}\n\noutput \"greeting\" {\n  value = module.m.greeting\n}\n"
	if err := os.WriteFile(filepath.Join(root, "main.tf"), []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(root, UID, GID); err != nil {
		t.Fatal(err)
	}
	runIn(t, img, rootfs, tmp, "tofu", "-chdir=/tmp/root", "init", "-input=false", "-no-color")
	runIn(t, img, rootfs, tmp, "tofu", "-chdir=/tmp/root", "apply", "-auto-approve", "-input=false", "-no-color")
	if out := runIn(t, img, rootfs, tmp, "tofu", "-chdir=/tmp/root", "output", "-raw", "greeting"); out != "hello from git" {
		t.Errorf("tofu output greeting = %q", out)
	}
}

// TestArm64ImagesRunUnderEmulation runs the arm64 binaries with qemu-user when this machine has
// it; the build has already checked every arm64 ELF file's architecture and libraries.
func TestArm64ImagesRunUnderEmulation(t *testing.T) {
	bs := build(t)
	qemu, err := exec.LookPath("qemu-aarch64-static")
	if err != nil {
		if qemu, err = exec.LookPath("qemu-aarch64"); err != nil {
			t.Skip("qemu-user is not installed (apt-get install qemu-user-static): the arm64 binaries are checked, not run")
		}
	}
	agent, job := find(t, bs, AgentName), find(t, bs, JobName)
	agentFS, jobFS := unpack(t, agent, "arm64"), unpack(t, job, "arm64")
	for _, c := range []struct {
		b      Built
		rootfs string
		args   []string
		want   string
	}{
		{agent, agentFS, []string{"/usr/local/bin/outpost-agent", "version"}, "outpost-agent "},
		{job, jobFS, []string{"/usr/local/bin/tofu", "version"}, "OpenTofu " + tofuVersion() + "\n"},
		{job, jobFS, []string{"/usr/bin/git", "--version"}, "git version 2."},
		{job, jobFS, []string{"/bin/sh", "-c", "echo $HOME"}, "/tmp\n"},
	} {
		cf, err := platformImage(t, c.b, "arm64").ConfigFile()
		if err != nil {
			t.Fatal(err)
		}
		// -L makes qemu load the program's interpreter and libraries from the image.
		cmd := exec.CommandContext(t.Context(), qemu, append([]string{"-L", c.rootfs, filepath.Join(c.rootfs, c.args[0])}, c.args[1:]...)...)
		cmd.Env = cf.Config.Env
		var stderr strings.Builder
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil || !strings.HasPrefix(string(out), c.want) {
			t.Errorf("%s under %s: %q (%v), want %q...\n%s", strings.Join(c.args, " "), qemu, out, err, c.want, stderr.String())
		}
	}
}

func fileDigest(t *testing.T, p string) string {
	t.Helper()
	f, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = f.Close() }()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(h.Sum(nil))
}

func TestBuildIsReproducible(t *testing.T) {
	first := build(t)
	second := filepath.Join(testDir, "second")
	start := time.Now()
	again, err := Build(context.Background(), testOptions(t, second))
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("warm rebuild in %s (first build in this test run: %s)", time.Since(start).Round(time.Second), buildTook.Round(time.Second))
	for i, b := range first {
		if again[i].Digest != b.Digest {
			t.Errorf("%s: index %s, then %s", b.Name, b.Digest, again[i].Digest)
		}
		if a, c := fileDigest(t, b.Archive), fileDigest(t, again[i].Archive); a != c {
			t.Errorf("%s: archive sha256 %s, then %s", b.Name, a, c)
		}
		t.Logf("%s %s", b.Ref, b.Digest)
		for _, p := range b.Platforms {
			t.Logf("  %s %s %.1f MiB", p.Platform, p.Digest, float64(p.Size)/(1<<20))
		}
	}
	var summary struct{ Images []Built }
	raw, err := os.ReadFile(filepath.Join(second, SummaryName))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(raw, &summary); err != nil || len(summary.Images) != 2 || summary.Images[1].Digest != first[1].Digest {
		t.Errorf("images.json: %+v (%v)", summary, err)
	}
}

// TestDebianLayersAreReproducibleFromCold fetches the Debian packages twice into empty caches
// and lays them out: the layers must be the same bytes. (The mirror must not publish an update
// between the two fetches, seconds apart.)
func TestDebianLayersAreReproducibleFromCold(t *testing.T) {
	requireBuildTools(t)
	digests := func() [2]string {
		d, err := debianLayers(context.Background(), t.TempDir(), "amd64", false, testLog{t})
		if err != nil {
			t.Fatal(err)
		}
		var out [2]string
		for i, f := range []*image.Files{d.base, d.job} {
			l, err := f.Layer()
			if err != nil {
				t.Fatal(err)
			}
			h, _ := l.Digest()
			out[i] = h.String()
		}
		return out
	}
	a, b := digests(), digests()
	if a != b {
		t.Fatalf("two cold fetches gave layers %v, then %v", a, b)
	}
	t.Logf("base %s, job packages %s", a[0], a[1])
}

// TestArchivesImportIntoContainerd imports both archives into a private containerd (its own
// root, state and socket in a temporary directory), as `ctr -n k8s.io images import` on a node,
// and checks the images arrive under their references with the built digests, unpacked for this
// machine's platform.
func TestArchivesImportIntoContainerd(t *testing.T) {
	bs := build(t)
	requireRoot(t)
	containerd, err1 := exec.LookPath("containerd")
	ctr, err2 := exec.LookPath("ctr")
	if err1 != nil || err2 != nil {
		t.Skip("containerd is not installed (apt-get install containerd): the archives are checked with go-containerregistry only")
	}
	dir := t.TempDir()
	sock := filepath.Join(dir, "containerd.sock")
	cfg := fmt.Sprintf(`version = 2
root = %q
state = %q
disabled_plugins = ["io.containerd.grpc.v1.cri", "io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs",
  "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper"]
[grpc]
  address = %q
[ttrpc]
  address = %q
[plugins."io.containerd.internal.v1.opt"]
  path = %q
`, filepath.Join(dir, "root"), filepath.Join(dir, "state"), sock, sock+".ttrpc", filepath.Join(dir, "opt"))
	if err := os.WriteFile(filepath.Join(dir, "config.toml"), []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	logf, err := os.Create(filepath.Join(dir, "containerd.log"))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = logf.Close() }()
	daemon := exec.CommandContext(t.Context(), containerd, "--config", filepath.Join(dir, "config.toml"))
	daemon.Stdout, daemon.Stderr = logf, logf
	if err := daemon.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		_ = daemon.Process.Signal(os.Interrupt)
		done := make(chan struct{})
		go func() { _ = daemon.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(20 * time.Second):
			_ = daemon.Process.Kill()
			<-done
		}
	}()
	ctrRun := func(args ...string) (string, error) {
		out, err := exec.CommandContext(t.Context(), ctr, append([]string{"--address", sock, "--namespace", "k8s.io"}, args...)...).CombinedOutput()
		return string(out), err
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		if _, err := ctrRun("version"); err == nil {
			break
		}
		if time.Now().After(deadline) {
			log, _ := os.ReadFile(filepath.Join(dir, "containerd.log"))
			t.Fatalf("containerd did not come up in 30 s:\n%s", log)
		}
		time.Sleep(200 * time.Millisecond)
	}
	for _, b := range bs {
		if out, err := ctrRun("images", "import", "--all-platforms", b.Archive); err != nil {
			t.Fatalf("ctr images import %s: %v\n%s", b.Archive, err, out)
		}
	}
	out, err := ctrRun("images", "ls")
	if err != nil {
		t.Fatalf("ctr images ls: %v\n%s", err, out)
	}
	for _, b := range bs {
		found := false
		for line := range strings.Lines(out) {
			f := strings.Fields(line)
			if len(f) >= 3 && f[0] == b.Ref {
				found = true
				if f[2] != b.Digest {
					t.Errorf("%s imported with digest %s, built %s", b.Ref, f[2], b.Digest)
				}
				if !strings.Contains(line, "linux/amd64") || !strings.Contains(line, "linux/arm64") {
					t.Errorf("%s imported without both platforms: %s", b.Ref, line)
				}
			}
		}
		if !found {
			t.Errorf("%s is not among the imported images:\n%s", b.Ref, out)
		}
		if check, err := ctrRun("images", "check", "name=="+b.Ref); err != nil || !strings.Contains(check, "complete") {
			t.Errorf("ctr images check %s: %v\n%s", b.Ref, err, check)
		}
	}
	t.Logf("ctr images ls:\n%s", out)
}

// TestMissingLibraryFailsTheBuild takes the real arm64 Debian layers, which this machine cannot
// run, and removes one shared library: the link check that every build runs must name it.
func TestMissingLibraryFailsTheBuild(t *testing.T) {
	requireBuildTools(t)
	d, err := debianLayers(context.Background(), CacheDir(os.Getenv), "arm64", false, testLog{t})
	if err != nil {
		t.Fatal(err)
	}
	if err := image.CheckLinks("arm64", d.base, d.job); err != nil {
		t.Fatalf("the complete arm64 layers fail the check: %v", err)
	}
	if err := image.CheckLinks("amd64", d.base, d.job); err == nil || !strings.Contains(err.Error(), "is built for EM_AARCH64") {
		t.Errorf("arm64 files in an amd64 image: %v", err)
	}
	withoutPCRE := image.NewFiles()
	for _, p := range d.job.Paths() {
		e, _ := d.job.Lookup(p)
		if strings.Contains(e.Path, "/libpcre2-8.so") {
			continue
		}
		if err := withoutPCRE.Add(e); err != nil {
			t.Fatal(err)
		}
	}
	err = image.CheckLinks("arm64", d.base, withoutPCRE)
	if err == nil || !strings.Contains(err.Error(), "/usr/bin/git needs libpcre2-8.so.0") {
		t.Errorf("without libpcre2-8 the check said: %v", err)
	}
}
