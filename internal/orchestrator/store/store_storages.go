package store

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/outpost-dev/terraform-provider-outpost/internal/api"
)

// CreateStorage registers a state storage of org, refusing one beyond the state storages quota.
func (s *Store) CreateStorage(ctx context.Context, org string, in api.StateStorageInput) (*api.StateStorage, error) {
	overQuota, err := s.objectQuota(ctx, KindStorage, org, "state storage", "--max-state-storages-per-org", s.quotas.StateStorages)
	if err != nil {
		return nil, err
	}
	return createOrgObject(ctx, s, KindStorage, org, in.ID, "state storage", func(tx Tx, now time.Time) (api.StateStorage, error) {
		if overQuota != nil {
			return api.StateStorage{}, overQuota
		}
		return api.StateStorage{StateStorageInput: in, CreatedAt: now, UpdatedAt: now}, nil
	})
}

func getStorageTx(tx Tx, org, id string) (*api.StateStorage, error) {
	return getOrgObject[api.StateStorage](tx, KindStorage, org, id, "state storage")
}

// GetStorage returns a state storage of org.
func (s *Store) GetStorage(ctx context.Context, org, id string) (*api.StateStorage, error) {
	return viewOrgObject[api.StateStorage](ctx, s, KindStorage, org, id, "state storage")
}

// ListStorages returns the state storages of org in id order.
func (s *Store) ListStorages(ctx context.Context, org string) ([]api.StateStorage, error) {
	return listOrgObjects[api.StateStorage](ctx, s, KindStorage, org)
}

// UpdateStorage replaces a state storage's settings.
func (s *Store) UpdateStorage(ctx context.Context, org string, in api.StateStorageInput) (*api.StateStorage, error) {
	return updateOrgObject(ctx, s, KindStorage, org, in.ID, "state storage", func(_ Tx, st *api.StateStorage, now time.Time) error {
		st.StateStorageInput, st.UpdatedAt = in, now
		return nil
	})
}

// DeleteStorage refuses while runners use the storage and names them, so the caller knows what
// to change first.
func (s *Store) DeleteStorage(ctx context.Context, org, id string) error {
	return s.Update(ctx, func(tx Tx) error {
		if _, err := getStorageTx(tx, org, id); err != nil {
			return err
		}
		var users []string
		if err := tx.ListDocs(KindRunner, org, func(v []byte) (bool, error) {
			var r api.Runner
			if err := Unmarshal(v, &r); err != nil {
				return false, err
			}
			if r.StateStorageID == id {
				users = append(users, fmt.Sprintf("%q", r.ID))
			}
			return true, nil
		}); err != nil {
			return err
		}
		if len(users) > 0 {
			sort.Strings(users)
			return conflict("state storage %q is used by runner(s) %s; point them at another state storage or delete them first", id, strings.Join(users, ", "))
		}
		if err := deleteStateOperationsTx(tx, org, id); err != nil {
			return err
		}
		if err := deleteStatesTx(tx, org, id); err != nil {
			return err
		}
		return tx.DeleteDoc(KindStorage, org, id)
	})
}
