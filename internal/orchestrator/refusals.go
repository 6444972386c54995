package orchestrator

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/outpost-dev/terraform-provider-outpost/internal/agentauth"
	"github.com/outpost-dev/terraform-provider-outpost/internal/api"
)

// refusalNoteEvery is how often at most one runner's refusals of one kind are written to the
// store: a locked-out agent retries every few seconds, and a refusal of an unknown key comes from
// a request nobody authenticated, so it must not cost a write each.
const refusalNoteEvery = 10 * time.Second

// refusalNotes remembers when each runner's refusal of each kind was last written. It holds an
// entry per existing runner and kind at most: unknown keys of runners that do not exist are not
// noted (agentauth leaves their runner unnamed).
type refusalNotes struct {
	mu   sync.Mutex
	last map[string]time.Time
}

// due reports whether a refusal under key may be written now, and if so marks it written.
func (n *refusalNotes) due(key string, now time.Time) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.last == nil {
		n.last = map[string]time.Time{}
	}
	if t, ok := n.last[key]; ok && now.Sub(t) < refusalNoteEvery {
		return false
	}
	n.last[key] = now
	return true
}

// noteRefusal records a refusal on the runner's status for the console and the CLI, at most once
// per refusalNoteEvery per runner and kind. A failed write is logged, never the request's error:
// the refusal the agent gets is the same either way.
func (s *Server) noteRefusal(ctx context.Context, org, runnerID string, ref api.RunnerRefusal) {
	if !s.refusals.due(org+"/"+runnerID+"/"+ref.Code, ref.At) {
		return
	}
	if err := s.store.NoteRefusal(ctx, org, runnerID, ref); err != nil {
		s.log.Warn("could not note a refused agent request on its runner", "org", org, "runner_id", runnerID, "code", ref.Code, "err", err)
	}
}

// noteKeyRefusal notes a request signed with a key its runner does not have, when the token
// named an existing runner.
func (s *Server) noteKeyRefusal(ctx context.Context, err error) {
	var ae *agentauth.Error
	if !errors.As(err, &ae) || ae.Reason != agentauth.ReasonUnknownKey || ae.RunnerID == "" {
		return
	}
	s.noteRefusal(ctx, ae.Org, ae.RunnerID, api.RunnerRefusal{Code: api.CodeUnknownKey, At: s.cfg.Now(), KeyFingerprint: ae.KeyID,
		Message: "the agent signs with key " + ae.KeyID + ", which the runner does not have; put the runner's private key in the agent's key Secret, or add its public key to the runner"})
}
