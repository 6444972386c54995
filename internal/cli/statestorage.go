package cli

import (
	"context"
	"time"

	"github.com/outpost-dev/terraform-provider-outpost/internal/api"
)

const stateStorageExample = `id: eu-1-states
type: kubernetes          # kubernetes, s3, gcs or azurerm, with the block of that name
description: states of the EU cluster, in Secrets
kubernetes:
  namespace: outpost-states
# s3:      {bucket: tf-state, region: eu-west-1, path_prefix: teams/a}
# gcs:     {bucket: tf-state, path_prefix: teams/a}
# azurerm: {storage_account_name: tfstate, container_name: states, resource_group_name: rg}`

func stateStorageResource() *resource[api.StateStorage, api.StateStorageInput] {
	return &resource[api.StateStorage, api.StateStorageInput]{
		kind: "state storage", command: "state-storage", aliases: []string{"state-storages", "storage"},
		short: "Register and inspect state storages (where a runner's deployments keep their state)",
		list:  func(ctx context.Context, s *session) ([]api.StateStorage, error) { return s.ListStateStorages(ctx) },
		get: func(ctx context.Context, s *session, id string) (*api.StateStorage, error) {
			return s.GetStateStorage(ctx, id)
		},
		create: func(ctx context.Context, s *session, in api.StateStorageInput) (*api.StateStorage, error) {
			return s.CreateStateStorage(ctx, in)
		},
		update: func(ctx context.Context, s *session, in api.StateStorageInput) (*api.StateStorage, error) {
			return s.UpdateStateStorage(ctx, in)
		},
		remove: func(ctx context.Context, s *session, id string) error { return s.DeleteStateStorage(ctx, id) },
		id:     func(in *api.StateStorageInput) *string { return &in.ID },
		adapter: docAdapter{adapt: func(doc map[string]any) (*translation, error) {
			dropKeys(doc, "created_at", "updated_at")
			return &translation{}, nil
		}},
		rows:    stateStorageRows,
		fields:  stateStorageFields,
		example: stateStorageExample,
		removed: "A state storage that runners use cannot be deleted; the answer names them. The states themselves stay where they are.",
	}
}

// location says where a state storage keeps states, in one cell.
func location(s *api.StateStorage) string {
	prefix := func(p string) string {
		if p == "" {
			return ""
		}
		return "/" + p
	}
	switch {
	case s.Kubernetes != nil:
		return "namespace " + s.Kubernetes.Namespace
	case s.S3 != nil:
		return "s3://" + s.S3.Bucket + prefix(s.S3.PathPrefix) + " (" + s.S3.Region + ")"
	case s.GCS != nil:
		return "gs://" + s.GCS.Bucket + prefix(s.GCS.PathPrefix)
	case s.AzureRM != nil:
		return s.AzureRM.StorageAccountName + "/" + s.AzureRM.ContainerName + prefix(s.AzureRM.PathPrefix)
	}
	return "-"
}

func stateStorageRows(now time.Time, items []api.StateStorage) [][]string {
	rows := [][]string{{"ID", "TYPE", "LOCATION", "CREATED", "DESCRIPTION"}}
	for i := range items {
		s := &items[i]
		rows = append(rows, []string{s.ID, s.Type, location(s), ago(now, &s.CreatedAt), oneLine(s.Description, 50)})
	}
	return rows
}

func stateStorageFields(now time.Time, s *api.StateStorage) [][2]string {
	var rg string
	if s.AzureRM != nil {
		rg = s.AzureRM.ResourceGroupName
	}
	return [][2]string{
		{"ID", s.ID},
		{"Type", s.Type},
		{"Description", s.Description},
		{"Location", location(s)},
		{"Resource group", rg},
		{"Created", stamp(now, &s.CreatedAt)},
		{"Updated", stamp(now, &s.UpdatedAt)},
	}
}
