package orchestrator

import (
	"context"
	"fmt"
	"sort"
	"strings"

	bolt "go.etcd.io/bbolt"

	"github.com/outpost-dev/terraform-provider-outpost/internal/api"
)

func storageFromInput(st *api.StateStorage, in api.StateStorageInput) {
	st.ID, st.Type, st.Description = in.ID, in.Type, in.Description
	st.Kubernetes, st.S3, st.GCS, st.AzureRM = in.Kubernetes, in.S3, in.GCS, in.AzureRM
}

func (s *store) createStorage(ctx context.Context, org string, in api.StateStorageInput) (*api.StateStorage, error) {
	var out api.StateStorage
	err := s.update(ctx, func(tx *bolt.Tx) error {
		b := tx.Bucket(bStorages)
		if b.Get(key(org, in.ID)) != nil {
			return conflict("state storage %q already exists in organisation %q; update it with PUT or choose another id", in.ID, org)
		}
		now := s.timeNow()
		out = api.StateStorage{CreatedAt: now, UpdatedAt: now}
		storageFromInput(&out, in)
		if err := ensureOrg(tx, org, now); err != nil {
			return err
		}
		return putJSON(b, key(org, in.ID), out)
	})
	if err != nil {
		return nil, err
	}
	return &out, nil
}

func getStorageTx(tx *bolt.Tx, org, id string) (*api.StateStorage, error) {
	return getOrgObject[api.StateStorage](tx, bStorages, org, id, "state storage")
}

func (s *store) getStorage(ctx context.Context, org, id string) (*api.StateStorage, error) {
	return viewOne(ctx, s, func(tx *bolt.Tx) (*api.StateStorage, error) { return getStorageTx(tx, org, id) })
}

func (s *store) listStorages(ctx context.Context, org string) ([]api.StateStorage, error) {
	return listOrgObjects[api.StateStorage](ctx, s, bStorages, org)
}

func (s *store) updateStorage(ctx context.Context, org string, in api.StateStorageInput) (*api.StateStorage, error) {
	var out *api.StateStorage
	err := s.update(ctx, func(tx *bolt.Tx) error {
		st, err := getStorageTx(tx, org, in.ID)
		if err != nil {
			return err
		}
		storageFromInput(st, in)
		st.UpdatedAt = s.timeNow()
		out = st
		return putJSON(tx.Bucket(bStorages), key(org, in.ID), st)
	})
	return out, err
}

// deleteStorage refuses while runners use the storage and names them, so the caller knows what
// to change first.
func (s *store) deleteStorage(ctx context.Context, org, id string) error {
	return s.update(ctx, func(tx *bolt.Tx) error {
		if _, err := getStorageTx(tx, org, id); err != nil {
			return err
		}
		var users []string
		if err := scanPrefix(tx.Bucket(bRunners), prefix(org), func(_, v []byte) (bool, error) {
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
		return tx.Bucket(bStorages).Delete(key(org, id))
	})
}
