package store

import (
	"context"
	"time"

	"github.com/outpost-dev/terraform-provider-outpost/internal/api"
)

// Engine is a storage engine: transactions and the few operations that are not per-record.
type Engine interface {
	// Update runs fn in a read-write transaction and commits when fn returns nil. fn may run
	// more than once (PostgreSQL retries serialization failures), so it must not keep state
	// from an earlier run.
	Update(ctx context.Context, fn func(tx Tx) error) error
	// Batch is Update for writes that many requests make at once (every poll's renewals): an
	// engine may run concurrent batches in one transaction, so they share a commit. fn may run
	// more than once.
	Batch(ctx context.Context, fn func(tx Tx) error) error
	// View runs fn in a transaction that sees one snapshot and writes nothing.
	View(ctx context.Context, fn func(tx Tx) error) error
	// Secret is the server HMAC secret of job tokens, shared by every replica of a database.
	Secret() []byte
	// PurgeReplay deletes agent token ids whose expiry is before now.
	PurgeReplay(ctx context.Context, now time.Time) (int, error)
	// CheckReplay remembers a token id until its expiry; seen reports that it was remembered
	// already and had not expired at now.
	CheckReplay(ctx context.Context, id string, now, until time.Time) (seen bool, err error)
	// Wake tells the long polls of a runner on other replicas to look again.
	Wake(ctx context.Context, runner string)
	// Close releases the database.
	Close() error
}

// DocKind names a kind of JSON object stored per organisation and id.
type DocKind int

const (
	KindRunner DocKind = iota
	KindStorage
	KindOrgToken
	KindSource  // api.Source of a deployment (kept apart: it can be 16 MiB)
	KindOutputs // api.Outputs of a deployment
	// KindSession is a console session (SessionRecord), kept under the organisation
	// SessionScope and the SHA-256 of its cookie: every replica finds every session.
	KindSession
	KindState // api.State: a state's versions and lock as its agent reported them; id "<storage>/<key>"
	// KindSchedule is an api.Schedule: when to queue a drift check of a state key.
	KindSchedule
	// KindDrift is the api.Drift of a drifted state key, id "<storage>/<key>"; a check without
	// changes deletes it, so the kind holds only the drifted ones.
	KindDrift
	KindPlan // api.SavedPlan of a plan deployment with save_plan; id the deployment's
	// KindStateOperation is an api.StateOperation, id "sop-…".
	KindStateOperation
	// KindStateOperationQueue lists the state operations of one state storage that have not
	// ended; id = the storage id.
	KindStateOperationQueue
)

// PurgeStageKind names a part of ended deployments that retention deletes.
type PurgeStageKind int

const (
	PurgeDeployments PurgeStageKind = iota
	PurgeLogsStage
	PurgeSources
)

// DueEntry is an ended deployment that a purge stage has not dealt with yet; key is the
// engine's own reference to the index entry.
type DueEntry struct {
	Org, ID string
	Key     []byte
}

// QueueDepth is how many deployments wait in one runner's queue.
type QueueDepth struct {
	Org, Runner string
	Queued      int
}

// LeaseRef names a deployment holding a job lease.
type LeaseRef struct {
	Org, Runner, Deployment string
}

// Tx is one engine transaction, the only way the rules reach records. Methods that find
// nothing return ok false (or an empty result) rather than an error.
type Tx interface {
	Writable() bool

	// CheckReplay is Engine.CheckReplay inside this transaction: the token id is remembered
	// only if the transaction commits.
	CheckReplay(id string, now, until time.Time) (seen bool, err error)

	GetDoc(k DocKind, org, id string, v any) (ok bool, err error)
	HasDoc(k DocKind, org, id string) (bool, error)
	PutDoc(k DocKind, org, id string, v any) error
	DeleteDoc(k DocKind, org, id string) error
	// ListDocs calls each with every object of a kind of org, in id order, until it says stop.
	ListDocs(k DocKind, org string, each func(data []byte) (more bool, err error)) error
	// ListAllDocs is ListDocs over every organisation, by organisation then id; it locks
	// nothing. The sweep finds due schedules and the metrics count drifted states with it.
	ListAllDocs(k DocKind, each func(org string, data []byte) (more bool, err error)) error
	// EnsureOrg records an organisation the first time something is created in it.
	EnsureOrg(org string, now time.Time) error
	// HasOrg reports whether an organisation was ever recorded.
	HasOrg(org string) (bool, error)

	PutOrgToken(rec *OrgTokenRecord) error
	DeleteOrgToken(rec *OrgTokenRecord) error
	OrgTokenByHash(h []byte) (*OrgTokenRecord, error)

	// LoadDeployment reads a deployment's record; in a read-write transaction it is locked
	// until the end of the transaction.
	LoadDeployment(org, id string) (*DeploymentRecord, bool, error)
	// InsertDeployment stores a new deployment and gives it the next sequence number.
	InsertDeployment(rec *DeploymentRecord) error
	// SaveDeployment writes a changed record and keeps what the engine derives from it (queue,
	// leases, status counts, purge indexes) in line with it.
	SaveDeployment(rec *DeploymentRecord) error
	// DeleteDeployment removes a purged deployment with its source, outputs and index entries.
	DeleteDeployment(rec *DeploymentRecord) error
	// ListDeployments calls each with the deployments of org, newest first.
	ListDeployments(org, runnerID string, status api.Status, each func(rec *DeploymentRecord) (bool, error)) error
	// Queued returns up to limit queued deployment ids of a runner, oldest first.
	Queued(org, runner string, limit int) ([]string, error)
	// CountQueued counts the queued deployments of org's runners, stopping at most; it locks
	// nothing.
	CountQueued(org string, most int) (int, error)
	// CountRunnerQueue counts one runner's queued deployments, stopping at most; it locks
	// nothing (Queued does, on PostgreSQL, to keep concurrent polls apart).
	CountRunnerQueue(org, runner string, most int) (int, error)
	// Leased returns the ids of a runner's deployments that hold a job lease.
	Leased(org, runner string) ([]string, error)
	// ExpiredLeases returns the deployments whose job lease ran out by now.
	ExpiredLeases(now time.Time) ([]LeaseRef, error)
	StatusCounts() (map[api.Status]int64, error)
	// QueueDepths counts the queued deployments of every runner that has any, by organisation
	// and runner; it locks nothing.
	QueueDepths() ([]QueueDepth, error)

	HasEvent(org, deployment string, attempt int, seq int64) (bool, error)
	PutEvent(org, deployment string, attempt int, seq int64, ev api.Event) error
	// CountEvents counts an attempt's events, stopping at most.
	CountEvents(org, deployment string, attempt, most int) (int, error)
	ListEvents(org, deployment string) ([]api.Event, error)
	// DeleteEvents deletes up to budget events of a deployment; finished when none is left.
	DeleteEvents(org, deployment string, budget int) (n int, finished bool, err error)

	// PutLogChunk stores b at stored offset start of a deployment's log.
	PutLogChunk(org, deployment string, start int64, b []byte) error
	LastLogByte(org, deployment string) (byte, error)
	// ReadLog returns up to limit stored bytes from offset.
	ReadLog(org, deployment string, offset, limit int64) ([]byte, error)
	DeleteLogs(org, deployment string, budget int) (n int, finished bool, err error)

	// NextDue returns the oldest deployment a purge stage has left that ended at or before
	// cutoff.
	NextDue(stage PurgeStageKind, cutoff time.Time) (DueEntry, bool, error)
	// DropDue marks a deployment as dealt with by a purge stage.
	DropDue(stage PurgeStageKind, e DueEntry) error
}

// WakeListener is an engine that hears wakes published by other replicas.
type WakeListener interface {
	// Listen calls n.wakeLocal for every wake another replica publishes, and n.wakeAll when
	// wakes may have been missed, until the engine is closed.
	Listen(n *Notifier)
}
