package testbed

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
)

// KubeconfigEnv names the environment variable that makes Main reuse a running test bed (the
// kubeconfig path printed by `make testbed-up`) instead of starting one per test binary.
const KubeconfigEnv = "OUTPOST_TESTBED_KUBECONFIG"

// startTimeout bounds how long Main waits for a test bed; a healthy one needs a few seconds.
const startTimeout = 4 * time.Minute

// SkipReason is why a test that needs the test bed is skipped under `go test -short`, the fast
// tier `make check` runs. Tests say it verbatim, so the skip summary groups them as one reason.
const SkipReason = "needs the Kubernetes test bed: skipped under -short (make check); make test runs it"

var (
	sharedMu sync.Mutex
	shared   *Cluster
	// skipped is set by Main under -short: Shared then skips instead of failing.
	skipped bool
)

// Main is for TestMain: it starts one test bed for the whole test binary (or reuses the one named
// by OUTPOST_TESTBED_KUBECONFIG), runs the tests, stops the test bed and exits. One test bed per
// package keeps tests fast (start-up costs seconds, a namespace per test costs milliseconds). If
// the test bed cannot start, Main fails the binary with the reason instead of skipping tests: a
// missing test bed must never look like a green run. The one exception is a real node
// (Options.Node) this machine cannot run (not root, no cgroups, a package missing): Main then
// starts the test bed without it, says why, and RequireNode skips the tests that need it, except
// under CI=true, where Main fails.
//
// Under -short (`make check`) Main starts nothing and runs the tests: those that call Shared are
// skipped with SkipReason, the package's plain unit tests run. With CI=true it refuses -short,
// because a CI run that skips the test bed would look green without having tested it.
func Main(m *testing.M, opts Options) {
	os.Exit(runMain(m, opts))
}

// fuzzing reports whether the binary runs with -fuzz: a fuzz target explores inputs with fakes,
// and every fuzz worker process runs TestMain, so each would start a test bed of its own.
func fuzzing() bool {
	f := flag.Lookup("test.fuzz")
	return f != nil && f.Value.String() != ""
}

func runMain(m *testing.M, opts Options) int {
	if !flag.Parsed() {
		flag.Parse() // for testing.Verbose and testing.Short; m.Run parses again harmlessly
	}
	if testing.Short() || fuzzing() {
		if err := CheckShortAllowed(); testing.Short() && err != nil {
			fmt.Fprintf(os.Stderr, "FAIL: testbed: %v\n", err)
			return 1
		}
		sharedMu.Lock()
		skipped = true
		sharedMu.Unlock()
		return m.Run()
	}
	started := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	c, err := StartOrReuse(ctx, opts)
	var nodeErr error
	if err != nil && opts.Node && IsNodeUnavailable(err) && !inCI() {
		nodeErr = err
		fmt.Fprintf(os.Stderr, "testbed: %v\ntestbed: starting without the real node; the tests that need it are skipped\n", err)
		withoutNode := opts
		withoutNode.Node = false
		c, err = StartOrReuse(ctx, withoutNode)
	}
	cancel()
	if err != nil {
		if IsNodeUnavailable(err) {
			err = fmt.Errorf("%w (%s=true: a run without real Pods must not pass)", err, CIEnv)
		}
		fmt.Fprintf(os.Stderr, "FAIL: testbed: %v\n", err)
		return 1
	}
	c.nodeErr = nodeErr
	verbose := testing.Verbose() || os.Getenv("OUTPOST_TESTBED_VERBOSE") != ""
	if verbose {
		fmt.Fprintf(os.Stderr, "testbed: ready in %s, kubeconfig %s\n", time.Since(started).Round(10*time.Millisecond), c.Kubeconfig)
	}
	sharedMu.Lock()
	shared = c
	sharedMu.Unlock()

	// Ctrl-C: stop the processes and remove the files before dying. (A SIGKILL or a `go test`
	// timeout kills the processes through Pdeathsig; their files are swept by a later run.)
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	go func() {
		sig := <-sigs
		fmt.Fprintf(os.Stderr, "testbed: %v: stopping the test bed\n", sig)
		_ = c.Stop()
		os.Exit(130)
	}()

	code := m.Run()
	signal.Stop(sigs)
	stopping := time.Now()
	err = c.Stop()
	if verbose {
		fmt.Fprintf(os.Stderr, "testbed: stopped in %s\n", time.Since(stopping).Round(10*time.Millisecond))
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "FAIL: %v\n", err)
		if code == 0 {
			code = 1
		}
	}
	return code
}

// StartOrReuse returns the test bed named by OUTPOST_TESTBED_KUBECONFIG if that is set, and
// otherwise starts a new one with Start. For a reused test bed with opts.Jobs it checks that the
// test bed runs Jobs (has the fake Node), so a mismatch fails clearly instead of as a Job that
// never finishes.
func StartOrReuse(ctx context.Context, opts Options) (*Cluster, error) {
	path := os.Getenv(KubeconfigEnv)
	if path == "" {
		return Start(ctx, opts)
	}
	c, err := Reuse(ctx, path)
	if err != nil {
		return nil, fmt.Errorf("%s=%s: %w", KubeconfigEnv, path, err)
	}
	if opts.Jobs && !c.Jobs {
		return nil, fmt.Errorf("%s=%s names a test bed without Jobs support (no Node %q); "+
			"start one with `make testbed-up` or unset %s", KubeconfigEnv, path, FakeNodeName, KubeconfigEnv)
	}
	if opts.Node && !c.Node {
		return nil, fmt.Errorf("%s=%s names a test bed without a real node (no Node %q); "+
			"start one with `make testbed-up NODE=1` or unset %s", KubeconfigEnv, path, RealNodeName, KubeconfigEnv)
	}
	return c, nil
}

// Reuse connects to an already running test bed (or any cluster) through a kubeconfig file and
// checks that it answers. Stop on the result does nothing: whoever started it stops it.
func Reuse(ctx context.Context, kubeconfig string) (*Cluster, error) {
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return nil, fmt.Errorf("loading the kubeconfig: %w", err)
	}
	cfg.QPS, cfg.Burst = 200, 400
	c := &Cluster{Kubeconfig: kubeconfig, RESTConfig: cfg, Host: cfg.Host, CAData: cfg.CAData, Token: cfg.BearerToken}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if _, err := cs.CoreV1().Namespaces().Get(ctx, metav1.NamespaceDefault, metav1.GetOptions{}); err != nil {
		return nil, fmt.Errorf("the cluster does not answer (is the test bed still running? `make testbed-up` starts one): %w", err)
	}
	switch _, err := cs.CoreV1().Nodes().Get(ctx, FakeNodeName, metav1.GetOptions{}); {
	case err == nil:
		c.Jobs = true
	case !apierrors.IsNotFound(err):
		return nil, fmt.Errorf("looking for the fake Node: %w", err)
	}
	switch _, err := cs.CoreV1().Nodes().Get(ctx, RealNodeName, metav1.GetOptions{}); {
	case err == nil:
		c.Node = true
		// A test bed from `outpost-testbed up` records where its node's containerd listens
		// beside its kubeconfig; ImportImage needs it.
		if st, _ := readState(filepath.Dir(kubeconfig)); st != nil && st.Node != nil {
			c.HostIP, c.Registry = st.Node.HostIP, st.Node.Registry
			c.containerdSockets = []string{st.Node.ContainerdSocket}
			c.RealNodes = []string{RealNodeName}
			for i, n := range st.MoreNodes {
				c.containerdSockets = append(c.containerdSockets, n.ContainerdSocket)
				c.RealNodes = append(c.RealNodes, realNodeName(i+2))
			}
		}
	case !apierrors.IsNotFound(err):
		return nil, fmt.Errorf("looking for the real Node: %w", err)
	}
	return c, nil
}

// CheckShortAllowed returns an error when the tests run under CI (the CI environment variable is
// true): the full suite must run there, so -short, which skips the test bed, is a mistake.
func CheckShortAllowed() error {
	if ci, _ := strconv.ParseBool(os.Getenv("CI")); ci {
		return errors.New("-short skips every test that needs the test bed, and CI=true is set: CI runs the full suite " +
			"(`make test`, without -short); unset CI to run the fast tier (`make check`) locally")
	}
	return nil
}

// Shared returns the test bed that Main started for this test binary. Under -short it skips the
// test with SkipReason. It fails the test (never skips it) when Main is not in use, because that
// is a mistake in the test, not a missing tool.
func Shared(t testing.TB) *Cluster {
	t.Helper()
	sharedMu.Lock()
	defer sharedMu.Unlock()
	if skipped {
		t.Skip(SkipReason)
	}
	if shared == nil {
		t.Fatal("testbed.Shared: no test bed; this package needs " +
			"`func TestMain(m *testing.M) { testbed.Main(m, testbed.Options{Jobs: true}) }`")
	}
	return shared
}

// ForTest gives a test a test bed of its own, for packages whose other tests need none (so they
// have no TestMain): it starts one (or reuses OUTPOST_TESTBED_KUBECONFIG's) and stops it when the
// test ends. Under -short it skips the test with SkipReason; a test bed that cannot start fails
// the test.
func ForTest(t testing.TB, opts Options) *Cluster {
	t.Helper()
	skipUnderShort(t)
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	c, err := StartOrReuse(ctx, opts)
	if err != nil {
		t.Fatalf("testbed: %v", err)
	}
	t.Cleanup(func() {
		if err := c.Stop(); err != nil {
			t.Errorf("testbed: stopping: %v", err)
		}
	})
	return c
}

// skipUnderShort skips a test that starts test bed processes under -short, and fails it if CI
// forbids -short.
func skipUnderShort(t testing.TB) {
	t.Helper()
	if testing.Short() {
		if err := CheckShortAllowed(); err != nil {
			t.Fatal(err)
		}
		t.Skip(SkipReason)
	}
}

var nsUnsafe = regexp.MustCompile(`[^a-z0-9-]+`)

// NewNamespace creates a namespace with a random name derived from the test's name, so tests can
// share one test bed and run in parallel without seeing each other's objects, and deletes it when
// the test ends. On a test bed with Jobs or a node it also waits for the namespace's "default"
// ServiceAccount, without which the first Pod of a Job would be refused.
func NewNamespace(t testing.TB, c *Cluster) string {
	t.Helper()
	base := nsUnsafe.ReplaceAllString(strings.ToLower(t.Name()), "-")
	base = strings.Trim(base, "-")
	if len(base) > 40 {
		base = strings.TrimRight(base[:40], "-")
	}
	name := "t-" + base + "-" + rand.String(6)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cs := c.Client()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"outpost.dev/test": "true"}}}
	if _, err := cs.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil {
		t.Fatalf("testbed: creating namespace %s: %v", name, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		err := cs.CoreV1().Namespaces().Delete(ctx, name, metav1.DeleteOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			t.Errorf("testbed: deleting namespace %s: %v", name, err)
		}
	})
	if c.Jobs || c.Node {
		for {
			_, err := cs.CoreV1().ServiceAccounts(name).Get(ctx, "default", metav1.GetOptions{})
			if err == nil {
				break
			}
			if ctx.Err() != nil {
				hint := "is kube-controller-manager running?"
				if c.Dir != "" {
					hint += " its log is " + filepath.Join(c.Dir, "logs", "kube-controller-manager.log")
				}
				t.Fatalf("testbed: the default ServiceAccount of namespace %s did not appear within 30s (%s): %v", name, hint, err)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	return name
}
