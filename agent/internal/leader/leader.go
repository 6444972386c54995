// Package leader runs the agent's work only on the replica that holds a coordination.k8s.io
// Lease. Two replicas give a fast failover (≈ lease duration) without two pollers claiming and
// re-adopting the same Jobs. A replica that loses the Lease stops polling and claiming at once
// but leaves the Jobs alone: they belong to whoever leads next.
package leader

import (
	"context"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/outpost-dev/terraform-provider-outpost/agent/internal/kubeclient"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
)

// Timings of the election (client-go's recommended defaults).
const (
	LeaseDuration = 15 * time.Second
	RenewDeadline = 10 * time.Second
	RetryPeriod   = 2 * time.Second
)

// Options configure the election.
type Options struct {
	Client    kubeclient.Interface
	Namespace string
	LeaseName string
	Identity  string
	Logger    *slog.Logger
	// OnChange is told whenever leadership is gained (true) or lost (false).
	OnChange func(bool)
	// OnNewLeader is told the identity of the current leader whenever it changes (this replica's
	// own identity included), so a standby can forward requests that only the leader can serve.
	OnNewLeader func(identity string)
}

// Run campaigns for the Lease until ctx ends and calls work with a context that is canceled
// when leadership is lost. After a loss it campaigns again: the replica becomes a standby rather
// than exiting, so a brief API outage does not turn into a restart.
func Run(ctx context.Context, o Options, work func(context.Context)) error {
	log := o.Logger
	if log == nil {
		log = slog.Default()
	}
	lock := &resourcelock.LeaseLock{
		LeaseMeta:  metav1.ObjectMeta{Namespace: o.Namespace, Name: o.LeaseName},
		Client:     o.Client.CoordinationV1(),
		LockConfig: resourcelock.ResourceLockConfig{Identity: o.Identity},
	}
	for ctx.Err() == nil {
		// done closes when this term's work has returned, so a new term never overlaps the old.
		done := make(chan struct{})
		var started atomic.Bool
		le, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
			Lock:            lock,
			LeaseDuration:   LeaseDuration,
			RenewDeadline:   RenewDeadline,
			RetryPeriod:     RetryPeriod,
			ReleaseOnCancel: true,
			Name:            o.LeaseName,
			Callbacks: leaderelection.LeaderCallbacks{
				OnStartedLeading: func(lctx context.Context) {
					log.Info("became leader", "lease", o.Namespace+"/"+o.LeaseName, "identity", o.Identity)
					notify(o, true)
					started.Store(true)
					defer close(done)
					work(lctx)
				},
				OnStoppedLeading: func() {
					log.Info("not leading", "lease", o.Namespace+"/"+o.LeaseName, "identity", o.Identity)
					notify(o, false)
				},
				OnNewLeader: func(id string) {
					if id != o.Identity {
						log.Info("another replica leads", "leader", id)
					}
					if o.OnNewLeader != nil {
						o.OnNewLeader(id)
					}
				},
			},
		})
		if err != nil {
			return fmt.Errorf("leader election: %w", err)
		}
		le.Run(ctx)
		if started.Load() {
			<-done
		}
	}
	return nil
}

func notify(o Options, v bool) {
	if o.OnChange != nil {
		o.OnChange(v)
	}
}
