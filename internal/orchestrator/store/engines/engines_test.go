package engines_test

import (
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/outpost-dev/terraform-provider-outpost/internal/orchestrator/store/engines"
	"github.com/outpost-dev/terraform-provider-outpost/internal/orchestrator/store/postgres"
)

// TestOpenAndCopyRefuseADatabaseURLWithoutVerifiedTLS (N6): the command's start (Open) and migrate-store
// (CopyStore) refuse a database URL that would reach PostgreSQL across the network without
// verified TLS before anything is sent, without repeating the password; the cases are in
// store/postgres (TestDatabaseURLNeedsVerifiedTLSOffLoopback).
func TestOpenAndCopyRefuseADatabaseURLWithoutVerifiedTLS(t *testing.T) {
	t.Parallel()
	_, err := engines.Open(t.Context(), engines.Options{DatabaseURL: "postgres://u:s3cret-pw@db.invalid/outpost"})
	if !errors.Is(err, postgres.ErrDatabaseTLS) || strings.Contains(err.Error(), "s3cret-pw") {
		t.Errorf("open a database URL without TLS: %v", err)
	}
	_, err = engines.CopyStore(t.Context(), t.TempDir(), "postgres://u:s3cret-pw@db.invalid/outpost?sslmode=require", false, io.Discard)
	if !errors.Is(err, postgres.ErrDatabaseTLS) || strings.Contains(err.Error(), "s3cret-pw") {
		t.Errorf("migrate-store with a database URL without verified TLS: %v", err)
	}
}
