package orchestrator

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/outpost-dev/terraform-provider-outpost/internal/api"
)

func (s *store) createStorage(ctx context.Context, org string, in api.StateStorageInput) (*api.StateStorage, error) {
	return createOrgObject(ctx, s, kindStorage, org, in.ID, "state storage", func(tx storeTx, now time.Time) (api.StateStorage, error) {
		if err := checkObjectQuota(tx, kindStorage, org, "state storage", "--max-state-storages-per-org", s.quotas.StateStorages); err != nil {
			return api.StateStorage{}, err
		}
		return api.StateStorage{StateStorageInput: in, CreatedAt: now, UpdatedAt: now}, nil
	})
}

func getStorageTx(tx storeTx, org, id string) (*api.StateStorage, error) {
	return getOrgObject[api.StateStorage](tx, kindStorage, org, id, "state storage")
}

func (s *store) getStorage(ctx context.Context, org, id string) (*api.StateStorage, error) {
	return viewOrgObject[api.StateStorage](ctx, s, kindStorage, org, id, "state storage")
}

func (s *store) listStorages(ctx context.Context, org string) ([]api.StateStorage, error) {
	return listOrgObjects[api.StateStorage](ctx, s, kindStorage, org)
}

func (s *store) updateStorage(ctx context.Context, org string, in api.StateStorageInput) (*api.StateStorage, error) {
	return updateOrgObject(ctx, s, kindStorage, org, in.ID, "state storage", func(_ storeTx, st *api.StateStorage, now time.Time) error {
		st.StateStorageInput, st.UpdatedAt = in, now
		return nil
	})
}

// deleteStorage refuses while runners use the storage and names them, so the caller knows what
// to change first.
func (s *store) deleteStorage(ctx context.Context, org, id string) error {
	return s.update(ctx, func(tx storeTx) error {
		if _, err := getStorageTx(tx, org, id); err != nil {
			return err
		}
		var users []string
		if err := tx.listDocs(kindRunner, org, func(v []byte) (bool, error) {
			var r api.Runner
			if err := unmarshal(v, &r); err != nil {
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
		return tx.deleteDoc(kindStorage, org, id)
	})
}
