package store

import (
	"errors"
	"testing"
	"time"

	"github.com/outpost-dev/terraform-provider-outpost/internal/agentauth"
	"github.com/outpost-dev/terraform-provider-outpost/internal/api"
)

// readFailingTx is a transaction whose reads fail as PostgreSQL's do under load (or find
// nothing, with a nil err).
type readFailingTx struct {
	Tx
	err error
}

func (f readFailingTx) GetDoc(DocKind, string, string, any) (bool, error) { return false, f.err }

// TestAgentRunnerReadErrorStaysAnError: a failed read of the runner an agent signs for is the
// database's error, which the engine runs again (a serialization failure) or answers 500, not
// "runner no longer exists": as a refusal it answered a poll 401 and made a claim commit a
// transaction PostgreSQL had aborted (HTTP 500, seen in BenchmarkOrchestratorScaleReplicas).
func TestAgentRunnerReadErrorStaysAnError(t *testing.T) {
	id := agentauth.Identity{Org: "acme", RunnerID: "r1"}
	dbErr := errors.New("ERROR: could not serialize access due to read/write dependencies among transactions (SQLSTATE 40001)")
	_, err := touchRunner(readFailingTx{err: dbErr}, id, "v1", time.Now())
	if _, refused := AsRefusal(err); refused || !errors.Is(err, dbErr) {
		t.Fatalf("a failed read of the runner gave %v, want the database's error", err)
	}
	_, err = touchRunner(readFailingTx{}, id, "v1", time.Now())
	if r, refused := AsRefusal(err); !refused || r.AuthReason != AuthReasonRunnerGone {
		t.Fatalf("a runner that is not there gave %v, want runnerGone", err)
	}
}

// TestPlacementReadErrorStaysAnError: the same for the runner and state storage a claim's
// placement reads: in a claim under load, a refusal there committed an aborted transaction.
func TestPlacementReadErrorStaysAnError(t *testing.T) {
	dbErr := errors.New("ERROR: could not serialize access due to read/write dependencies among transactions (SQLSTATE 40001)")
	rec := &DeploymentRecord{Org: "acme"}
	rec.D.ID, rec.D.RunnerID = "d1", "r1"
	_, _, err := runnerAndStorage(readFailingTx{err: dbErr}, rec)
	if _, refused := AsRefusal(err); refused || !errors.Is(err, dbErr) {
		t.Fatalf("a failed read of the claim's runner gave %v, want the database's error", err)
	}
	if _, _, err := runnerAndStorage(readFailingTx{}, rec); err == nil {
		t.Fatal("a runner that is not there gave no error")
	} else if r, refused := AsRefusal(err); !refused || r.Code != api.CodeNotFound {
		t.Fatalf("a runner that is not there gave %v, want not found", err)
	}
}
