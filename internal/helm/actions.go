package helm

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"time"

	"helm.sh/helm/v3/pkg/action"
	"helm.sh/helm/v3/pkg/chart"
	"helm.sh/helm/v3/pkg/release"
	"helm.sh/helm/v3/pkg/storage/driver"
)

// InstallOptions are the settings of an install or upgrade.
type InstallOptions struct {
	ReleaseName string
	Namespace   string
	// Timeout bounds Helm's own waiting (hooks). The context bounds the whole call; keep Timeout a
	// little shorter so Helm records its own failure before the context gives up.
	Timeout time.Duration
	// Description is recorded on the release revision (helm history shows it).
	Description string
}

// Install installs chrt as a new release. It does not wait for the release's workloads to become
// ready. A non-nil release with an error means Helm recorded a failed release.
//
// GOTCHA: when ctx ends during the install, Helm returns at once but its install goroutine keeps
// writing to the release it returned (a data race inside Helm). Callers must not read the
// release of an error that matches context.Canceled or context.DeadlineExceeded.
func Install(ctx context.Context, cfg *action.Configuration, chrt *chart.Chart, vals map[string]any, opts InstallOptions) (*release.Release, error) {
	in := action.NewInstall(cfg)
	in.ReleaseName = opts.ReleaseName
	in.Namespace = opts.Namespace
	in.Timeout = opts.Timeout
	in.Description = opts.Description
	in.Wait = false
	return runAction(ctx, "install", opts, func() (*release.Release, error) { return in.RunWithContext(ctx, chrt, vals) })
}

// Upgrade upgrades an existing release to chrt with exactly vals (the values of earlier
// revisions are not reused). It does not wait for the workloads to become ready. The GOTCHA of
// Install applies.
func Upgrade(ctx context.Context, cfg *action.Configuration, chrt *chart.Chart, vals map[string]any, opts InstallOptions) (*release.Release, error) {
	up := action.NewUpgrade(cfg)
	up.Namespace = opts.Namespace
	up.Timeout = opts.Timeout
	up.Description = opts.Description
	up.Wait = false
	up.ResetValues = true
	up.MaxHistory = MaxHistory
	return runAction(ctx, "upgrade", opts, func() (*release.Release, error) { return up.RunWithContext(ctx, opts.ReleaseName, chrt, vals) })
}

// runAction runs an install or upgrade unless ctx already ended, naming the release in its
// errors. The release comes back with the error, as Helm returns it.
func runAction(ctx context.Context, verb string, opts InstallOptions, run func() (*release.Release, error)) (*release.Release, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("%s release %q in namespace %q: %w", verb, opts.ReleaseName, opts.Namespace, err)
	}
	rel, err := run()
	if err != nil {
		return rel, fmt.Errorf("%s release %q in namespace %q: %w", verb, opts.ReleaseName, opts.Namespace, err)
	}
	return rel, nil
}

// Get returns the newest revision of a release, whatever its status. The error matches
// driver.ErrReleaseNotFound (see IsNotFound) when the release does not exist.
func Get(cfg *action.Configuration, name string) (*release.Release, error) {
	rel, err := action.NewGet(cfg).Run(name)
	if err != nil {
		return nil, fmt.Errorf("get release %q: %w", name, err)
	}
	return rel, nil
}

// History returns every stored revision of a release, oldest first.
func History(cfg *action.Configuration, name string) ([]*release.Release, error) {
	rels, err := action.NewHistory(cfg).Run(name)
	if err != nil {
		return nil, fmt.Errorf("read history of release %q: %w", name, err)
	}
	sort.Slice(rels, func(i, j int) bool { return rels[i].Version < rels[j].Version })
	return rels, nil
}

// IsNotFound reports whether err says the release does not exist.
func IsNotFound(err error) bool {
	return errors.Is(err, driver.ErrReleaseNotFound)
}

// Uninstall removes a release and its history. A release that does not exist is not an error.
// Helm's uninstall takes no context: it runs bounded by timeout, and the call returns early
// (with the context's error) when ctx ends first.
func Uninstall(ctx context.Context, cfg *action.Configuration, name string, timeout time.Duration) error {
	un := action.NewUninstall(cfg)
	un.Timeout = timeout
	un.IgnoreNotFound = true
	un.Wait = false
	err := runBounded(ctx, func() error {
		_, err := un.Run(name)
		return err
	})
	if err != nil {
		return fmt.Errorf("uninstall release %q: %w", name, err)
	}
	return nil
}

// Rollback rolls a release back to revision (which must exist in its history). Helm's rollback
// takes no context; see Uninstall.
func Rollback(ctx context.Context, cfg *action.Configuration, name string, revision int, timeout time.Duration) error {
	rb := action.NewRollback(cfg)
	rb.Version = revision
	rb.Timeout = timeout
	rb.Wait = false
	rb.MaxHistory = MaxHistory
	if err := runBounded(ctx, func() error { return rb.Run(name) }); err != nil {
		return fmt.Errorf("roll back release %q to revision %d: %w", name, revision, err)
	}
	return nil
}

// runBounded runs fn and returns its error, or the context's error if ctx ends first (fn then
// finishes in the background; its result is dropped).
func runBounded(ctx context.Context, fn func() error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	done := make(chan error, 1)
	go func() { done <- fn() }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}
