package connection

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/outpost-dev/terraform-provider-outpost/agent/internal/kubeclient"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// DefaultEvery is how often, at most, the record is written while nothing but the time of the
// last successful poll changes: every long poll (up to 30 s) succeeds, and a write per poll
// would be a write on the API server per poll per runner.
const DefaultEvery = 30 * time.Second

// writeTimeout bounds one write of the record.
const writeTimeout = 10 * time.Second

// RecorderOptions configure a Recorder.
type RecorderOptions struct {
	Client    kubeclient.Interface
	Namespace string
	LeaseName string
	// Identity is this replica's name (its pod), recorded with the status; with Elected, the
	// record is written only while the Lease names it as holder.
	Identity string
	// Elected: the Lease is the leader Lease and only its holder writes. Without leader election
	// the single replica creates the Lease if it is missing and writes its record there, holding
	// nothing.
	Elected bool
	// URL is the orchestrator's URL; it is recorded without user info or query.
	URL string
	// Every is the least time between two writes that change nothing but times (DefaultEvery
	// when zero). A change between succeeding and failing is written at once.
	Every  time.Duration
	Logger *slog.Logger
}

// Recorder keeps the record of the connection on the Lease. The session tells it every poll's
// outcome (PollOK, PollFailed), which never blocks; Run writes the record, throttled.
type Recorder struct {
	o    RecorderOptions
	log  *slog.Logger
	now  func() time.Time
	wake chan struct{}

	mu  sync.Mutex
	cur Status
	// dirty: cur holds something not written yet.
	dirty bool
	// written is what the last write put on the Lease in this term, nil before the first.
	written   *Status
	writtenAt time.Time
	// retryAt is when a write that failed is tried again.
	retryAt time.Time
	// lastWriteErr is the last write error logged, so a failing write is logged once.
	lastWriteErr string
}

// retryWrite is the wait after a write that failed (at most Every).
const retryWrite = 5 * time.Second

// NewRecorder returns a Recorder.
func NewRecorder(o RecorderOptions) *Recorder {
	if o.Every <= 0 {
		o.Every = DefaultEvery
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	return &Recorder{o: o, log: o.Logger.With("component", "connection"), now: time.Now, wake: make(chan struct{}, 1),
		cur: Status{URL: redactURL(o.URL), Instance: o.Identity}}
}

// PollOK records a successful poll answered by an orchestrator of the given release.
func (r *Recorder) PollOK(orchestratorVersion string) {
	r.update(func(s *Status) {
		s.LastOK = r.now()
		if orchestratorVersion != "" {
			s.Version = orchestratorVersion
		}
	})
}

// PollFailed records a failed poll.
func (r *Recorder) PollFailed(err error) {
	if err == nil {
		return
	}
	r.update(func(s *Status) { s.LastError, s.Kind, s.LastErrorAt = shortError(err), KindOf(err), r.now() })
}

func (r *Recorder) update(f func(*Status)) {
	r.mu.Lock()
	f(&r.cur)
	r.dirty = true
	r.mu.Unlock()
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

// Reset starts a new term: the next outcome is written at once, and nothing of an earlier term
// (this replica may have led before) is written again. Call it before the term's session starts.
func (r *Recorder) Reset() {
	r.mu.Lock()
	r.cur = Status{URL: redactURL(r.o.URL), Instance: r.o.Identity}
	r.dirty, r.written, r.writtenAt, r.retryAt = false, nil, time.Time{}, time.Time{}
	r.mu.Unlock()
}

// next returns the status to write now, or how long to wait before asking again (0: until an
// outcome arrives). A term's first outcome and every change between succeeding and failing are
// written at once; anything else waits until Every has passed since the last write.
func (r *Recorder) next() (Status, time.Duration, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.dirty {
		return Status{}, 0, false
	}
	if wait := r.retryAt.Sub(r.now()); wait > 0 {
		return Status{}, wait, false
	}
	if r.written == nil || r.written.Failing() != r.cur.Failing() {
		return r.cur, 0, true
	}
	if wait := r.writtenAt.Add(r.o.Every).Sub(r.now()); wait > 0 {
		return Status{}, wait, false
	}
	return r.cur, 0, true
}

// Run writes the record whenever it is due, until ctx ends (the end of the term).
func (r *Recorder) Run(ctx context.Context) {
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		st, wait, due := r.next()
		if due {
			err := r.write(ctx, st)
			r.wrote(st, err)
			continue
		}
		var tick <-chan time.Time
		if wait > 0 {
			timer.Reset(wait)
			tick = timer.C
		}
		select {
		case <-ctx.Done():
			return
		case <-r.wake:
		case <-tick:
		}
	}
}

// wrote notes the outcome of a write. One that failed is tried again after retryWrite (or
// Every, if shorter), so an API server that refuses is not asked in a loop.
func (r *Recorder) wrote(st Status, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	switch {
	case err == nil:
		r.written, r.writtenAt, r.lastWriteErr = &st, r.now(), ""
		r.dirty = r.cur != st
	case errors.Is(err, errNotHolder):
		// Leadership moved on; the next term starts with Reset.
		r.dirty = false
	default:
		r.retryAt = r.now().Add(min(retryWrite, r.o.Every))
		if msg := err.Error(); msg != r.lastWriteErr {
			r.lastWriteErr = msg
			r.log.Warn("cannot record the connection to the orchestrator on the Lease; `helm test` will not see it", "lease", r.o.Namespace+"/"+r.o.LeaseName, "err", err)
		}
	}
}

// errNotHolder: the Lease names another holder, whose record this replica must not overwrite.
var errNotHolder = errors.New("this replica does not hold the Lease")

// write puts st on the Lease: a read and an update under the Lease's resourceVersion, so the
// leader election's own updates (which keep annotations) and this one never undo each other.
func (r *Recorder) write(ctx context.Context, st Status) error {
	ctx, cancel := context.WithTimeout(ctx, writeTimeout)
	defer cancel()
	leases := r.o.Client.CoordinationV1().Leases(r.o.Namespace)
	for range 3 {
		lease, err := leases.Get(ctx, r.o.LeaseName, metav1.GetOptions{})
		if apierrors.IsNotFound(err) && !r.o.Elected {
			lease = &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: r.o.LeaseName, Namespace: r.o.Namespace, Annotations: map[string]string{}}}
			st.annotate(lease.Annotations)
			if _, err = leases.Create(ctx, lease, metav1.CreateOptions{}); apierrors.IsAlreadyExists(err) {
				continue
			}
			return err
		}
		if err != nil {
			return err
		}
		if r.o.Elected && (lease.Spec.HolderIdentity == nil || *lease.Spec.HolderIdentity != r.o.Identity) {
			return errNotHolder
		}
		if lease.Annotations == nil {
			lease.Annotations = map[string]string{}
		}
		st.annotate(lease.Annotations)
		if _, err = leases.Update(ctx, lease, metav1.UpdateOptions{}); apierrors.IsConflict(err) {
			continue
		}
		return err
	}
	return fmt.Errorf("the Lease %s/%s kept changing under three updates", r.o.Namespace, r.o.LeaseName)
}
