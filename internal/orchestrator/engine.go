package orchestrator

import (
	"context"
	"time"

	"github.com/outpost-dev/terraform-provider-outpost/internal/api"
)

// The orchestrator keeps its rules (store_*.go: what a claim, an event, a lease expiry or a purge
// does) apart from where records live. An engine is where they live: bbolt in a data directory
// (engine_bolt*.go, the default for one machine) or PostgreSQL (engine_pg*.go, for several
// replicas). The rules run inside one engine transaction at a time through storeTx, so both
// engines give the same answers and the same test suite runs against both.

// engine is a storage engine: transactions and the few operations that are not per-record.
type engine interface {
	// update runs fn in a read-write transaction and commits when fn returns nil. fn may run
	// more than once (PostgreSQL retries serialization failures), so it must not keep state
	// from an earlier run.
	update(ctx context.Context, fn func(tx storeTx) error) error
	// batch is update for writes that many requests make at once (every poll's renewals): an
	// engine may run concurrent batches in one transaction, so they share a commit. fn may run
	// more than once.
	batch(ctx context.Context, fn func(tx storeTx) error) error
	// view runs fn in a transaction that sees one snapshot and writes nothing.
	view(ctx context.Context, fn func(tx storeTx) error) error
	// secret is the server HMAC secret of job tokens, shared by every replica of a database.
	secret() []byte
	// purgeReplay deletes agent token ids whose expiry is before now.
	purgeReplay(ctx context.Context, now time.Time) (int, error)
	// checkReplay remembers a token id until its expiry; seen reports that it was remembered
	// already and had not expired at now.
	checkReplay(ctx context.Context, id string, now, until time.Time) (seen bool, err error)
	// wake tells the long polls of a runner on other replicas to look again.
	wake(ctx context.Context, runner string)
	close() error
}

// docKind names a kind of JSON object stored per organisation and id.
type docKind int

const (
	kindRunner docKind = iota
	kindStorage
	kindOrgToken
	kindSource  // api.Source of a deployment (kept apart: it can be 16 MiB)
	kindOutputs // api.Outputs of a deployment
)

// purgeStageKind names a part of ended deployments that retention deletes.
type purgeStageKind int

const (
	purgeDeployments purgeStageKind = iota
	purgeLogsStage
	purgeSources
)

// dueEntry is an ended deployment that a purge stage has not dealt with yet; key is the
// engine's own reference to the index entry.
type dueEntry struct {
	org, id string
	key     []byte
}

// leaseRef names a deployment holding a job lease.
type leaseRef struct {
	org, runner, deployment string
}

// storeTx is one engine transaction, the only way the rules reach records. Methods that find
// nothing return ok false (or an empty result) rather than an error.
type storeTx interface {
	writable() bool

	getDoc(k docKind, org, id string, v any) (ok bool, err error)
	hasDoc(k docKind, org, id string) (bool, error)
	putDoc(k docKind, org, id string, v any) error
	deleteDoc(k docKind, org, id string) error
	// listDocs calls each with every object of a kind of org, in id order, until it says stop.
	listDocs(k docKind, org string, each func(data []byte) (more bool, err error)) error
	// ensureOrg records an organisation the first time something is created in it.
	ensureOrg(org string, now time.Time) error
	// hasOrg reports whether an organisation was ever recorded.
	hasOrg(org string) (bool, error)

	putOrgToken(rec *orgTokenRecord) error
	deleteOrgToken(rec *orgTokenRecord) error
	orgTokenByHash(h []byte) (*orgTokenRecord, error)

	// loadDeployment reads a deployment's record; in a read-write transaction it is locked
	// until the end of the transaction.
	loadDeployment(org, id string) (*deploymentRecord, bool, error)
	// insertDeployment stores a new deployment and gives it the next sequence number.
	insertDeployment(rec *deploymentRecord) error
	// saveDeployment writes a changed record and keeps what the engine derives from it (queue,
	// leases, status counts, purge indexes) in line with it.
	saveDeployment(rec *deploymentRecord) error
	// deleteDeployment removes a purged deployment with its source, outputs and index entries.
	deleteDeployment(rec *deploymentRecord) error
	// listDeployments calls each with the deployments of org, newest first.
	listDeployments(org, runnerID string, status api.Status, each func(rec *deploymentRecord) (bool, error)) error
	// queued returns up to limit queued deployment ids of a runner, oldest first.
	queued(org, runner string, limit int) ([]string, error)
	// countQueued counts the queued deployments of org's runners, stopping at most; it locks
	// nothing.
	countQueued(org string, most int) (int, error)
	// leased returns the ids of a runner's deployments that hold a job lease.
	leased(org, runner string) ([]string, error)
	// expiredLeases returns the deployments whose job lease ran out by now.
	expiredLeases(now time.Time) ([]leaseRef, error)
	statusCounts() (map[api.Status]int64, error)

	hasEvent(org, deployment string, attempt int, seq int64) (bool, error)
	putEvent(org, deployment string, attempt int, seq int64, ev api.Event) error
	// countEvents counts an attempt's events, stopping at most.
	countEvents(org, deployment string, attempt, most int) (int, error)
	listEvents(org, deployment string) ([]api.Event, error)
	// deleteEvents deletes up to budget events of a deployment; finished when none is left.
	deleteEvents(org, deployment string, budget int) (n int, finished bool, err error)

	// putLogChunk stores b at stored offset start of a deployment's log.
	putLogChunk(org, deployment string, start int64, b []byte) error
	lastLogByte(org, deployment string) (byte, error)
	// readLog returns up to limit stored bytes from offset.
	readLog(org, deployment string, offset, limit int64) ([]byte, error)
	deleteLogs(org, deployment string, budget int) (n int, finished bool, err error)

	// nextDue returns the oldest deployment a purge stage has left that ended at or before
	// cutoff.
	nextDue(stage purgeStageKind, cutoff time.Time) (dueEntry, bool, error)
	// dropDue marks a deployment as dealt with by a purge stage.
	dropDue(stage purgeStageKind, e dueEntry) error
}

// wakeListener is an engine that hears wakes published by other replicas.
type wakeListener interface {
	// listen calls n.wakeLocal for every wake another replica publishes, and n.wakeAll when
	// wakes may have been missed, until the engine is closed.
	listen(n *notifier)
}
