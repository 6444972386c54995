package store

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/outpost-dev/terraform-provider-outpost/internal/api"
)

// Quotas bound what one organisation can make the orchestrator store, so that one team (or one
// leaked organisation token) cannot fill the database every organisation shares. A create beyond
// a quota is refused with 403 quota_exceeded naming the quota, the count and the flag; nothing
// is stored. Zero fields take the defaults below.
type Quotas struct {
	// Runners is the most runners of one organisation (--max-runners-per-org).
	Runners int
	// StateStorages is the most state storages of one organisation
	// (--max-state-storages-per-org).
	StateStorages int
	// Schedules is the most schedules of one organisation (--max-schedules-per-org).
	Schedules int
	// QueuedDeployments is the most deployments of one organisation waiting in its runners'
	// queues (--max-queued-deployments-per-org). Each can hold a 16 MiB source.
	QueuedDeployments int
	// LogBytes is the most log bytes one organisation's deployments keep stored until they are
	// purged (--max-log-bytes-per-org); beyond it new deployments are refused. The count is
	// taken at most once a minute per organisation.
	LogBytes int64
}

// Defaults of Quotas: far above what a team uses, far below what fills a disk.
const (
	DefaultMaxRunners           = 1000
	DefaultMaxStateStorages     = 1000
	DefaultMaxSchedules         = 1000
	DefaultMaxQueuedDeployments = 10000
	DefaultMaxLogBytes          = 10 << 30
)

func (q Quotas) withDefaults() Quotas {
	if q.Runners <= 0 {
		q.Runners = DefaultMaxRunners
	}
	if q.StateStorages <= 0 {
		q.StateStorages = DefaultMaxStateStorages
	}
	if q.Schedules <= 0 {
		q.Schedules = DefaultMaxSchedules
	}
	if q.QueuedDeployments <= 0 {
		q.QueuedDeployments = DefaultMaxQueuedDeployments
	}
	if q.LogBytes <= 0 {
		q.LogBytes = DefaultMaxLogBytes
	}
	return q
}

// logUsageTTL is how long an organisation's counted log bytes are taken as current.
const LogUsageTTL = time.Minute

// quotaExceeded is the refusal of a create beyond a quota.
func quotaExceeded(format string, args ...any) *Refusal {
	return Refuse(api.CodeQuotaExceeded, format, args...)
}

// countDocs counts an organisation's objects of kind k, stopping once it is past most.
func countDocs(tx Tx, k DocKind, org string, most int) (int, error) {
	n := 0
	err := tx.ListDocs(k, org, func([]byte) (bool, error) {
		n++
		return n <= most, nil
	})
	return n, err
}

// objectQuota counts org's objects of kind k (what, flag) against limit and returns the refusal
// of one more, or nil; the error is the count's own failure. It counts in a read-only
// transaction of its own, before the create's, which returns the refusal after its own checks:
// counted inside the create's SERIALIZABLE transaction on PostgreSQL, the read of every object of
// the organisation conflicted with each create beside it, and creates side by side failed after
// their retries (BenchmarkOrchestratorScaleReplicas: 21,940 rolled back beside 11,923 committed
// while registering 30,000 runners). Creates side by side may pass a quota by as many as run at
// once, which a quota against runaway automation can afford.
func (s *Store) objectQuota(ctx context.Context, k DocKind, org, what, flag string, limit int) (refusal, err error) {
	var n int
	err = s.view(ctx, func(tx Tx) error {
		var err error
		n, err = countDocs(tx, k, org, limit)
		return err
	})
	if err != nil {
		return nil, err
	}
	if n >= limit {
		return quotaExceeded("organisation %q has %d %ss, its quota; delete one it no longer needs, or ask the operator to raise %s", org, limit, what, flag), nil
	}
	return nil, nil
}

// checkQueueQuota refuses another queued deployment when org's runners hold limit queued ones.
// It counts in a read-only transaction of its own: counting in the create's would lock or
// conflict with the claims of every queued deployment, and a count a few behind does no harm.
func (s *Store) checkQueueQuota(ctx context.Context, org string, limit int) error {
	var n int
	err := s.view(ctx, func(tx Tx) error {
		var err error
		n, err = tx.CountQueued(org, limit)
		return err
	})
	if err != nil {
		return err
	}
	if n >= limit {
		return quotaExceeded("organisation %q has %d deployments queued, its quota; wait until its runners start some, cancel some, or ask the operator to raise --max-queued-deployments-per-org", org, limit)
	}
	return nil
}

// logUsage keeps each organisation's stored log bytes, counted at most once per logUsageTTL.
type logUsage struct {
	mu    sync.Mutex
	bytes map[string]logCount
}

type logCount struct {
	n  int64
	at time.Time
}

// count returns org's stored log bytes, counting them again (in a read-only transaction of its
// own, so the count never makes a write conflict) when the last count is older than
// logUsageTTL.
func (u *logUsage) count(ctx context.Context, s *Store, org string) (int64, error) {
	now := s.TimeNow()
	u.mu.Lock()
	c, ok := u.bytes[org]
	u.mu.Unlock()
	if ok && now.Sub(c.at) < LogUsageTTL {
		return c.n, nil
	}
	var n int64
	err := s.view(ctx, func(tx Tx) error {
		n = 0
		return tx.ListDeployments(org, "", "", func(rec *DeploymentRecord) (bool, error) {
			if rec.D.LogsPurgedAt == nil {
				n += rec.D.LogSize
			}
			return true, nil
		})
	})
	if err != nil {
		return 0, err
	}
	u.mu.Lock()
	if u.bytes == nil {
		u.bytes = map[string]logCount{}
	}
	u.bytes[org] = logCount{n: n, at: now}
	u.mu.Unlock()
	return n, nil
}

// checkLogQuota refuses a new deployment while org's stored logs hold limit bytes or more.
func (s *Store) checkLogQuota(ctx context.Context, org string, limit int64) error {
	n, err := s.logs.count(ctx, s, org)
	if err != nil {
		return err
	}
	if n >= limit {
		return quotaExceeded("organisation %q keeps %d log bytes of its deployments, its quota of %d; logs are purged --log-retention after their deployment ended, "+
			"or ask the operator to raise --max-log-bytes-per-org", org, n, limit)
	}
	return nil
}

// String is the quotas for the start log.
func (q Quotas) String() string {
	return fmt.Sprintf("runners %d, state storages %d, schedules %d, queued deployments %d, log bytes %d per organisation", q.Runners, q.StateStorages, q.Schedules, q.QueuedDeployments, q.LogBytes)
}
