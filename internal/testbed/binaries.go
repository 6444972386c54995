package testbed

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
)

//go:generate go run gen_versions.go

// BinDirEnv names an environment variable that, when set, is the directory holding the test bed's
// binaries, instead of the versioned directory in the user's cache. It exists for CI systems that
// restore prebuilt binaries to a path of their choosing.
const BinDirEnv = "OUTPOST_TESTBED_BIN_DIR"

// binaryNames are the executables every test bed needs, in start order (a real node needs
// nodeBinaryNames too; the cache is complete without them, so a test bed without a node works
// from a cache built before the node existed).
var binaryNames = []string{"etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok"}

// cacheRoot is ${OUTPOST_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/outpost}, the directory the
// GNUmakefile and the scripts build into.
func cacheRoot() (string, error) {
	if dir := os.Getenv("OUTPOST_CACHE"); dir != "" {
		return dir, nil
	}
	dir, err := os.UserCacheDir()
	if err != nil {
		return "", fmt.Errorf("finding the cache directory for test bed binaries: %w (set XDG_CACHE_HOME or HOME)", err)
	}
	return filepath.Join(dir, "outpost"), nil
}

// versionKeyPrefix is the part of the cache key that names the component versions.
func versionKeyPrefix() string {
	return fmt.Sprintf("k8s-%s_etcd-%s_kwok-%s_", KubernetesVersion, EtcdVersion, KwokVersion)
}

// BinDir is the directory scripts/testbed-build.sh installs the binaries into when built with the
// Go toolchain that built this program: <cache>/testbed/<versions>_<go version>/bin. The Go
// version is part of the key because the binaries embed the Go runtime (security fixes).
func BinDir() (string, error) {
	if dir := os.Getenv(BinDirEnv); dir != "" {
		return dir, nil
	}
	root, err := cacheRoot()
	if err != nil {
		return "", err
	}
	return filepath.Join(root, "testbed", versionKeyPrefix()+runtime.Version(), "bin"), nil
}

// findBinaries returns a directory holding every test bed binary. It prefers BinDir and falls
// back to a set built with another Go version of the same component versions, so a Go patch
// upgrade does not force a five-minute rebuild before the next test run.
func findBinaries() (string, error) {
	want, err := BinDir()
	if err != nil {
		return "", err
	}
	if complete(want) {
		return want, nil
	}
	if os.Getenv(BinDirEnv) == "" {
		pattern := filepath.Join(filepath.Dir(filepath.Dir(want)), versionKeyPrefix()+"*", "bin")
		others, _ := filepath.Glob(pattern)
		slices.Sort(others)
		slices.Reverse(others) // newest Go version first, roughly
		for _, dir := range others {
			if complete(dir) {
				return dir, nil
			}
		}
	}
	var missing []string
	for _, name := range binaryNames {
		if !isExecutable(filepath.Join(want, name)) {
			missing = append(missing, name)
		}
	}
	return "", &MissingBinariesError{Dir: want, Missing: missing}
}

// MissingBinariesError says that the test bed cannot start because its binaries have not been
// built; its message tells the reader the command that builds them.
type MissingBinariesError struct {
	Dir     string   // where the binaries were looked for
	Missing []string // names of the missing executables
}

// Error implements error.
func (e *MissingBinariesError) Error() string {
	return fmt.Sprintf("test bed binaries not found in %s (missing: %v); run `make testbed-build` "+
		"(builds them from source, about 10 min once, cached afterwards)", e.Dir, e.Missing)
}

// IsMissingBinaries reports whether err says the test bed binaries have not been built.
func IsMissingBinaries(err error) bool {
	var target *MissingBinariesError
	return errors.As(err, &target)
}

func complete(dir string) bool {
	for _, name := range binaryNames {
		if !isExecutable(filepath.Join(dir, name)) {
			return false
		}
	}
	return true
}

func isExecutable(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0
}

// Kubectl returns the path of the test bed's kubectl, built from the same Kubernetes release as
// its other parts (scripts/testbed-build.sh), for tests that act as a cluster operator would
// (`kubectl drain`). Point it at the test bed with --kubeconfig Cluster.Kubeconfig.
func Kubectl() (string, error) {
	dir, err := findBinaries()
	if err != nil {
		return "", err
	}
	path := filepath.Join(dir, "kubectl")
	if !isExecutable(path) {
		return "", &MissingBinariesError{Dir: dir, Missing: []string{"kubectl"}}
	}
	return path, nil
}
