// Package store is the reference orchestrator's rules: what a claim, an event, a lease expiry or
// a purge does (store_*.go, leases.go), the job tokens (jobtoken.go) and the wakes of long polls
// (notify.go), apart from where records live. An engine is where they live: bbolt in a data
// directory (package store/bolt, the default for one machine) or PostgreSQL (store/postgres, for
// several replicas); store/engines opens the one a configuration names. The rules run inside one
// engine transaction at a time through Tx (engine.go), so both engines give the same answers and
// the same test suite runs against both.
//
// A rule refuses what the caller caused with a *Refusal carrying an API error code, never an HTTP
// status: the HTTP face (package orchestrator) picks the status. depguard keeps net/http, the
// face and the engines out of this package.
package store

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/outpost-dev/terraform-provider-outpost/internal/api"
)

// Store is the orchestrator's persistent state: the rules of the API over a storage engine.
// Every method that changes more than one record does so in one engine transaction, so an
// invariant (a deployment is queued exactly when it is in its runner's queue, a job lease exists
// exactly when its deployment holds one, the per-status counts match the deployments) holds
// across crashes and, with PostgreSQL, across replicas.
type Store struct {
	eng    Engine
	secret []byte
	now    func() time.Time
	// logCap is the most log bytes kept per deployment.
	logCap int64
	// quotas bound what one organisation stores; logs counts its log bytes for them.
	quotas Quotas
	logs   logUsage
}

// OrgRecord is an organisation as stored: created with the first object in it.
type OrgRecord struct {
	CreatedAt time.Time `json:"created_at"`
}

// Options configure a store.
type Options struct {
	// Secret signs job tokens.
	Secret []byte
	// Now is the clock of leases, token checks and timestamps.
	Now func() time.Time
	// LogCap is the most log bytes kept per deployment.
	LogCap int64
	// Quotas bound what one organisation stores (zero fields take the defaults).
	Quotas Quotas
}

// New runs the rules over eng.
func New(eng Engine, o Options) *Store {
	return &Store{eng: eng, secret: o.Secret, now: o.Now, logCap: o.LogCap, quotas: o.Quotas.withDefaults()}
}

// Close closes the engine.
func (s *Store) Close() error { return s.eng.Close() }

// Update runs fn in a write transaction unless ctx is already done. When fn refuses the request
// (a *Refusal or an api.FieldError), what it wrote before refusing is still committed: the
// store only ever writes ahead of a refusal to settle an expired lease or to record that an
// agent was seen, and both are true whatever the request asked, so the state a refusal reports
// is the state stored. Any other error rolls back.
func (s *Store) Update(ctx context.Context, fn func(tx Tx) error) error {
	return s.write(ctx, s.eng.Update, fn)
}

// batch is update for the writes every poll makes (the runner's last sighting, job lease
// renewals), which the engine may commit together with other polls' (engine.batch).
func (s *Store) batch(ctx context.Context, fn func(tx Tx) error) error {
	return s.write(ctx, s.eng.Batch, fn)
}

func (s *Store) write(ctx context.Context, run func(context.Context, func(Tx) error) error, fn func(tx Tx) error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	var refused error
	err := run(ctx, func(tx Tx) error {
		refused = nil
		err := fn(tx)
		if _, ok := AsRefusal(err); ok {
			refused = err
			return nil
		}
		return err
	})
	if err != nil {
		return err
	}
	return refused
}

// view runs fn in a read transaction unless ctx is already done.
func (s *Store) view(ctx context.Context, fn func(tx Tx) error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	return s.eng.View(ctx, fn)
}

// TimeNow is the store's clock without monotonic reading, in UTC, so stored and returned times
// compare equal after a JSON round trip.
func (s *Store) TimeNow() time.Time { return s.now().UTC().Round(0) }

// Unmarshal decodes a stored JSON record, saying so when it cannot.
func Unmarshal(data []byte, v any) error {
	if err := json.Unmarshal(data, v); err != nil {
		return fmt.Errorf("decode stored record: %w", err)
	}
	return nil
}

// createOrgObject stores a new object of an organisation under id in bucket, refusing an id that
// is taken; build makes the object at time now, and may refuse the input. what names the kind of
// object in messages.
func createOrgObject[T any](ctx context.Context, s *Store, k DocKind, org, id, what string, build func(tx Tx, now time.Time) (T, error)) (*T, error) {
	var out T
	err := s.Update(ctx, func(tx Tx) error {
		taken, err := tx.HasDoc(k, org, id)
		if err != nil {
			return err
		}
		if taken {
			return conflict("%s %q already exists in organisation %q; update it with PUT or choose another id", what, id, org)
		}
		now := s.TimeNow()
		v, err := build(tx, now)
		if err != nil {
			return err
		}
		if err := tx.EnsureOrg(org, now); err != nil {
			return err
		}
		out = v
		return tx.PutDoc(k, org, id, v)
	})
	if err != nil {
		return nil, err
	}
	return &out, nil
}

// CheckOrg refuses an organisation in which nothing was ever created: with the bootstrap admin
// token any name reaches one, and a mistyped name would otherwise read as an empty organisation.
func (s *Store) CheckOrg(ctx context.Context, org string) error {
	var ok bool
	if err := s.view(ctx, func(tx Tx) (err error) {
		ok, err = tx.HasOrg(org)
		return err
	}); err != nil {
		return err
	}
	if !ok {
		return Refuse(api.CodeOrgNotFound, "no such organisation %q on this orchestrator: nothing was ever created in it. "+
			"Check the name; an organisation begins with its first state storage, runner or organisation token", org)
	}
	return nil
}

// updateOrgObject changes a stored object of an organisation; change applies the input to it at
// time now, and may refuse it.
func updateOrgObject[T any](ctx context.Context, s *Store, k DocKind, org, id, what string, change func(tx Tx, v *T, now time.Time) error) (*T, error) {
	var out *T
	err := s.Update(ctx, func(tx Tx) error {
		v, err := getOrgObject[T](tx, k, org, id, what)
		if err != nil {
			return err
		}
		if err := change(tx, v, s.TimeNow()); err != nil {
			return err
		}
		out = v
		return tx.PutDoc(k, org, id, v)
	})
	return out, err
}

// getOrgObject reads one JSON object of an organisation from bucket; what names it in the
// not-found message.
func getOrgObject[T any](tx Tx, k DocKind, org, id, what string) (*T, error) {
	var v T
	ok, err := tx.GetDoc(k, org, id, &v)
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, NotFound("%s %q does not exist in organisation %q", what, id, org)
	}
	return &v, nil
}

// viewOrgObject is getOrgObject in a read transaction of its own.
func viewOrgObject[T any](ctx context.Context, s *Store, k DocKind, org, id, what string) (*T, error) {
	return viewOne(ctx, s, func(tx Tx) (*T, error) { return getOrgObject[T](tx, k, org, id, what) })
}

// listOrgObjects reads every JSON object of an organisation from bucket, in key order.
func listOrgObjects[T any](ctx context.Context, s *Store, k DocKind, org string) ([]T, error) {
	out := []T{}
	err := s.view(ctx, func(tx Tx) error {
		return tx.ListDocs(k, org, func(data []byte) (bool, error) {
			var v T
			if err := Unmarshal(data, &v); err != nil {
				return false, err
			}
			out = append(out, v)
			return true, nil
		})
	})
	return out, err
}

// viewOne runs a read-only transaction that produces one value.
func viewOne[T any](ctx context.Context, s *Store, fn func(tx Tx) (*T, error)) (*T, error) {
	var out *T
	err := s.view(ctx, func(tx Tx) error {
		v, err := fn(tx)
		out = v
		return err
	})
	return out, err
}
