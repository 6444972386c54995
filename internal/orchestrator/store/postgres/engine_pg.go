// Package postgres is the orchestrator's storage engine for several replicas: the records in
// PostgreSQL (schema in migrations/, applied at start), wakes between replicas over
// LISTEN/NOTIFY. It implements store.Engine, store.Tx and store.WakeListener; the rules in
// package store run on it unchanged.
package postgres

import (
	"context"
	"crypto/rand"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	mrand "math/rand/v2"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/outpost-dev/terraform-provider-outpost/internal/orchestrator/store"
)

// Engine keeps the orchestrator's records in PostgreSQL, so that any number of orchestrator
// replicas serve the same organisations. Read-write transactions are SERIALIZABLE and retried on
// serialization failures: every rule then runs as if alone, as it does on bbolt, whichever
// replicas run at the same time.
type Engine struct {
	Pool    *pgxpool.Pool
	log     *slog.Logger
	sec     []byte
	schema  string
	replica string // tells this replica's wakes from the others'

	stop     context.CancelFunc
	listenWG sync.WaitGroup
	// retries counts transactions run again after a serialization failure.
	retries atomic.Int64
}

//go:embed migrations/*.sql
var migrations embed.FS

// wakeChannel is the NOTIFY channel of wakes; the payload is "schema replica org/runner".
const wakeChannel = "outpost_wake"

// migrationLock is the advisory lock that keeps replicas starting together from migrating at once.
const migrationLock = 0x6f7574706f7374 // "outpost"

// DatabaseInsecureTLSFlag is the opt-in by name to a database URL without verified TLS.
const DatabaseInsecureTLSFlag = "--database-insecure-tls"

// ParsePGConfig parses dsn and checks its TLS (CheckDatabaseTLS).
func ParsePGConfig(dsn string, insecureTLS bool) (*pgxpool.Config, error) {
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		// The parse error can quote the DSN, password included.
		return nil, errors.New("database URL is not a valid PostgreSQL connection string (postgres://user:password@host:port/database?sslmode=...)")
	}
	if err := CheckDatabaseTLS(&cfg.ConnConfig.Config, insecureTLS, DatabaseInsecureTLSFlag+" (OUTPOST_ORCHESTRATOR_DATABASE_INSECURE_TLS=true)"); err != nil {
		return nil, err
	}
	return cfg, nil
}

// Open connects to the database dsn names and brings its schema up to date. Off loopback it
// refuses a URL without verified TLS unless insecureTLS (see CheckDatabaseTLS).
func Open(ctx context.Context, dsn string, insecureTLS bool, log *slog.Logger) (*Engine, error) {
	cfg, err := ParsePGConfig(dsn, insecureTLS)
	if err != nil {
		return nil, err
	}
	if !strings.Contains(dsn, "pool_max_conns") {
		cfg.MaxConns = 16
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	pool, err := pgxpool.NewWithConfig(context.WithoutCancel(ctx), cfg)
	if err != nil {
		return nil, fmt.Errorf("connect to PostgreSQL at %s: %w", cfg.ConnConfig.Host, err)
	}
	e := &Engine{Pool: pool, log: log}
	if err := e.init(ctx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("PostgreSQL at %s:%d database %q: %w", cfg.ConnConfig.Host, cfg.ConnConfig.Port, cfg.ConnConfig.Database, err)
	}
	return e, nil
}

func (e *Engine) init(ctx context.Context) error {
	if err := e.Pool.QueryRow(ctx, "SELECT current_schema()").Scan(&e.schema); err != nil {
		return fmt.Errorf("check the connection: %w", err)
	}
	if err := e.migrate(ctx); err != nil {
		return err
	}
	sec := make([]byte, 32)
	if _, err := rand.Read(sec); err != nil {
		return fmt.Errorf("generate server secret: %w", err)
	}
	if _, err := e.Pool.Exec(ctx, "INSERT INTO meta (name, value) VALUES ('secret', $1) ON CONFLICT DO NOTHING", sec); err != nil {
		return fmt.Errorf("store server secret: %w", err)
	}
	if err := e.Pool.QueryRow(ctx, "SELECT value FROM meta WHERE name = 'secret'").Scan(&e.sec); err != nil {
		return fmt.Errorf("read server secret: %w", err)
	}
	id := make([]byte, 6)
	_, _ = rand.Read(id)
	e.replica = store.IDEncoding.EncodeToString(id)
	return nil
}

// migrate applies the embedded migrations the database has not seen, in one transaction under
// an advisory lock, and refuses a database written by a newer orchestrator. It is kept here rather
// than taken from tern: tern's migrate package links sprig and nine other modules into the
// orchestrator for SQL templating these migrations do not use, and its version table would need an
// adoption step for databases this code already migrated (schema_migrations).
func (e *Engine) migrate(ctx context.Context) error {
	names, err := fs.Glob(migrations, "migrations/*.sql")
	if err != nil {
		return err
	}
	sort.Strings(names)
	return pgx.BeginFunc(ctx, e.Pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock($1)", int64(migrationLock)); err != nil {
			return fmt.Errorf("lock for migrations: %w", err)
		}
		if _, err := tx.Exec(ctx, `CREATE TABLE IF NOT EXISTS schema_migrations (
			version integer PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now())`); err != nil {
			return fmt.Errorf("create schema_migrations (does the user own the schema?): %w", err)
		}
		var current int
		if err := tx.QueryRow(ctx, "SELECT coalesce(max(version), 0) FROM schema_migrations").Scan(&current); err != nil {
			return err
		}
		if current > len(names) {
			return fmt.Errorf("the database was migrated by a newer orchestrator (schema %d, this one knows %d); run the newer version", current, len(names))
		}
		for i, name := range names {
			version := i + 1
			if n, _ := strconv.Atoi(strings.SplitN(strings.TrimPrefix(name, "migrations/"), "_", 2)[0]); n != version {
				return fmt.Errorf("migration %s is out of sequence (want number %d)", name, version)
			}
			if version <= current {
				continue
			}
			sql, err := migrations.ReadFile(name)
			if err != nil {
				return err
			}
			if _, err := tx.Exec(ctx, string(sql)); err != nil {
				return fmt.Errorf("apply migration %s: %w", name, err)
			}
			if _, err := tx.Exec(ctx, "INSERT INTO schema_migrations (version) VALUES ($1)", version); err != nil {
				return err
			}
		}
		return nil
	})
}

// Secret implements store.Engine.
func (e *Engine) Secret() []byte { return e.sec }

// Retries counts the transactions run again after a serialization failure so far.
func (e *Engine) Retries() int64 { return e.retries.Load() }

// Close implements store.Engine.
func (e *Engine) Close() error {
	if e.stop != nil {
		e.stop()
	}
	e.listenWG.Wait()
	e.Pool.Close()
	return nil
}

// retryable tells serialization failures and deadlocks, which a rerun of the transaction fixes.
func retryable(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && (pe.Code == "40001" || pe.Code == "40P01")
}

// outageWait is how long a transaction waits for the database to come back (a restart, a
// failover) before its request is answered 503.
const outageWait = 5 * time.Second

// run runs fn in a transaction of the given isolation, again while it fails with a
// serialization failure, with a growing random pause in between. A transaction whose connection
// was lost before its commit was sent (the database restarted or failed over, or a pooled
// connection died meanwhile) changed nothing, so it runs again on a new connection, for up to
// outageWait; after that the error is a *store.UnavailableError, which the API answers with 503
// and Retry-After, so every client retries — creates too. A connection lost during the commit
// leaves its outcome unknown, and that error is returned as it is.
func (e *Engine) run(ctx context.Context, iso pgx.TxIsoLevel, write bool, fn func(tx store.Tx) error) error {
	pause := time.Millisecond
	var outage time.Time
	for tries := 1; ; {
		applied, err := e.once(ctx, iso, write, fn)
		var wait time.Duration
		switch {
		case err == nil:
			return nil
		case !applied && ctx.Err() == nil:
			if outage.IsZero() {
				outage = time.Now()
				e.log.Warn("lost the connection to PostgreSQL before a transaction committed; running it again on a new connection", "err", err)
			}
			if time.Since(outage) > outageWait {
				return &store.UnavailableError{Err: err}
			}
			wait = 100 * time.Millisecond
		case retryable(err) && tries < 30:
			tries++
			e.retries.Add(1)
			wait = pause/2 + mrand.N(pause)
			pause = min(pause*2, 50*time.Millisecond)
		default:
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(wait):
		}
	}
}

// once runs fn in one transaction. applied is false when the transaction cannot have changed
// anything because the database was not reached, or the session was lost before the commit
// was sent; then running it again is safe.
func (e *Engine) once(ctx context.Context, iso pgx.TxIsoLevel, write bool, fn func(tx store.Tx) error) (applied bool, err error) {
	tx, err := e.Pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: iso})
	if err != nil {
		// Acquiring a connection or sending BEGIN: nothing of fn has run.
		return false, err
	}
	if err := fn(&Tx{ctx: ctx, tx: tx, write: write}); err != nil {
		lost := tx.Conn().IsClosed()
		_ = tx.Rollback(ctx)
		// A session that ended before COMMIT rolled its transaction back.
		return !lost, err
	}
	if err := tx.Commit(ctx); err != nil {
		return !pgconn.SafeToRetry(err), err
	}
	return true, nil
}

// Batch is update: PostgreSQL commits concurrent transactions together by itself.
func (e *Engine) Batch(ctx context.Context, fn func(tx store.Tx) error) error {
	return e.Update(ctx, fn)
}

// Update implements store.Engine.
func (e *Engine) Update(ctx context.Context, fn func(tx store.Tx) error) error {
	return e.run(ctx, pgx.Serializable, true, fn)
}

// View takes one snapshot (REPEATABLE READ); it is not READ ONLY because the queue is read
// with FOR UPDATE SKIP LOCKED.
func (e *Engine) View(ctx context.Context, fn func(tx store.Tx) error) error {
	return e.run(ctx, pgx.RepeatableRead, false, fn)
}

// CheckReplay implements store.Engine.
func (e *Engine) CheckReplay(ctx context.Context, id string, now, until time.Time) (bool, error) {
	// One statement: insert the id, or take over an expired one; no row back means it is
	// remembered and still valid.
	var got string
	err := e.Pool.QueryRow(ctx, replaySQL, id, until.UnixNano(), now.UnixNano()).Scan(&got)
	if errors.Is(err, pgx.ErrNoRows) {
		return true, nil
	}
	return false, err
}

// replaySQL inserts a token id, or takes over an expired one; no row back means it is
// remembered and still valid.
const replaySQL = `INSERT INTO replay (token_id, expires_ns) VALUES ($1, $2)
		ON CONFLICT (token_id) DO UPDATE SET expires_ns = excluded.expires_ns WHERE replay.expires_ns < $3
		RETURNING token_id`

// PurgeReplay implements store.Engine.
func (e *Engine) PurgeReplay(ctx context.Context, now time.Time) (int, error) {
	tag, err := e.Pool.Exec(ctx, "DELETE FROM replay WHERE expires_ns < $1", now.UnixNano())
	return int(tag.RowsAffected()), err
}

// Wake implements store.Engine.
func (e *Engine) Wake(ctx context.Context, runner string) {
	// Bounded: the request that queued the work waits for this, and other replicas' polls see
	// the work at their next look anyway.
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	payload := e.schema + " " + e.replica + " " + runner
	if _, err := e.Pool.Exec(ctx, "SELECT pg_notify($1, $2)", wakeChannel, payload); err != nil {
		e.log.Warn("could not tell other replicas to wake a runner's polls; they see its work at their next poll", "runner", runner, "err", err)
	}
}

// Listen hears the wakes of other replicas on one connection of its own until close. After
// every (re)connection it wakes all local polls, since wakes sent meanwhile were missed.
func (e *Engine) Listen(n *store.Notifier) {
	ctx, cancel := context.WithCancel(context.Background())
	e.stop = cancel
	e.listenWG.Add(1)
	go func() {
		defer e.listenWG.Done()
		for ctx.Err() == nil {
			err := e.listenOnce(ctx, n)
			if ctx.Err() != nil {
				return
			}
			e.log.Warn("lost the PostgreSQL connection that hears other replicas; reconnecting", "err", err)
			select {
			case <-ctx.Done():
			case <-time.After(time.Second):
			}
		}
	}()
}

func (e *Engine) listenOnce(ctx context.Context, n *store.Notifier) error {
	conn, err := e.Pool.Acquire(ctx)
	if err != nil {
		return err
	}
	// The connection leaves the pool: it is in LISTEN state and blocked in a wait.
	c := conn.Hijack()
	defer func() { _ = c.Close(context.Background()) }()
	if _, err := c.Exec(ctx, "LISTEN "+wakeChannel); err != nil {
		return err
	}
	n.WakeAll()
	for {
		msg, err := c.WaitForNotification(ctx)
		if err != nil {
			return err
		}
		parts := strings.SplitN(msg.Payload, " ", 3)
		if len(parts) == 3 && parts[0] == e.schema && parts[1] != e.replica {
			n.WakeLocal(parts[2])
		}
	}
}
