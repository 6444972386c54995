package helm

import (
	"context"
	"time"

	"helm.sh/helm/v3/pkg/action"
	"helm.sh/helm/v3/pkg/release"
)

// Recovery actions.
const (
	RecoveryNone      = ""
	RecoveryRollback  = "rollback"
	RecoveryUninstall = "uninstall"
)

// Recovery says what RecoverPending did.
type Recovery struct {
	// Action is RecoveryNone, RecoveryRollback or RecoveryUninstall.
	Action string
	// PendingRevision and PendingStatus describe the revision that was stuck.
	PendingRevision int
	PendingStatus   release.Status
	// RolledBackTo is the revision rolled back to (RecoveryRollback only).
	RolledBackTo int
}

// RecoverPending repairs a release whose newest revision is stuck in pending-install,
// pending-upgrade or pending-rollback, which happens when the client that started the operation
// went away (Helm issues #4558, #7476, #11863). Helm then refuses every further upgrade with
// "another operation is in progress".
//
// The release is rolled back to its newest deployed (or superseded) revision; if it never had
// one, it is uninstalled, so the caller can install it afresh. A release that does not exist or
// is not pending is left alone. The caller must be the only writer of the release: recovery
// would break an operation that is genuinely still running.
func RecoverPending(ctx context.Context, cfg *action.Configuration, name string, timeout time.Duration) (Recovery, error) {
	rels, err := History(cfg, name)
	if IsNotFound(err) {
		return Recovery{}, nil
	}
	if err != nil {
		return Recovery{}, err
	}
	if len(rels) == 0 {
		return Recovery{}, nil
	}
	last := rels[len(rels)-1]
	if !last.Info.Status.IsPending() {
		return Recovery{}, nil
	}
	rec := Recovery{PendingRevision: last.Version, PendingStatus: last.Info.Status}
	var target *release.Release
	for i := len(rels) - 2; i >= 0; i-- {
		s := rels[i].Info.Status
		if s == release.StatusDeployed || s == release.StatusSuperseded {
			target = rels[i]
			break
		}
	}
	if target == nil {
		rec.Action = RecoveryUninstall
		return rec, Uninstall(ctx, cfg, name, timeout)
	}
	rec.Action = RecoveryRollback
	rec.RolledBackTo = target.Version
	return rec, Rollback(ctx, cfg, name, target.Version, timeout)
}
