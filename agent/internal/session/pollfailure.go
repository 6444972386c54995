package session

// What a failed poll tells: its reason label, and the readiness check that fails while the
// orchestrator refuses the agent's key.

import (
	"errors"
	"fmt"
	"time"

	"github.com/outpost-dev/terraform-provider-outpost/internal/api"
)

// pollFailure is the reason label of a failed poll.
func pollFailure(err error) string {
	switch {
	case errors.Is(err, api.ErrUnknownKey):
		return "unknown_key"
	case errors.Is(err, api.ErrUnauthorized):
		return "unauthorized"
	case errors.Is(err, api.ErrIncompatibleProtocol):
		return "incompatible_protocol"
	case errors.Is(err, api.ErrUnavailable):
		return "unavailable"
	}
	return "other"
}

// keyCheck is the readiness check that fails while the orchestrator refuses the agent's key.
const keyCheck = "orchestrator_key"

// keyRefusedError says which key was refused and what to do, before the orchestrator's answer.
// It is what readiness, the log and the connection record (which `helm test` reads) show.
func (s *Session) keyRefusedError(err error) error {
	// Short enough that the connection record (300 bytes) keeps the fingerprint, the code and the advice.
	return fmt.Errorf("unknown_key: the runner has no public key for this agent's key %s: add its public half to the runner's public_keys, "+
		"or give the agent a key the runner has (privateKey.existingSecret): %w", s.keyFingerprint(), err)
}

func (s *Session) keyFingerprint() string {
	if c, ok := s.o.Client.(interface{ KeyFingerprint() string }); ok {
		return c.KeyFingerprint()
	}
	return "(unknown)"
}

// keyRefused makes a refused key visible at once, since nothing heals it but a person: readiness
// fails with msg (keyRefusedError), the key_refused metric is 1, and the log says so (once per
// refusal, not on every retry). The agent keeps polling, so it is let in as soon as the key is
// registered or the right key reaches it. Called by the poll loop only.
func (s *Session) keyRefused(msg error, wait time.Duration) {
	fp := s.keyFingerprint()
	if s.o.Health != nil {
		s.o.Health.SetCheck(keyCheck, msg)
	}
	s.o.Metrics.KeyRefused.Set(1)
	if !s.refusedKey {
		s.refusedKey = true
		s.log.Error("the orchestrator refuses this agent's key; polling on until it is registered", "err", msg, "key_fingerprint", fp,
			"wait", wait.Round(time.Millisecond).String())
		return
	}
	s.log.Debug("poll refused: unknown key", "key_fingerprint", fp, "wait", wait.Round(time.Millisecond).String())
}

// keyAccepted clears what keyRefused set, after a poll got through. Called by the poll loop only.
func (s *Session) keyAccepted() {
	if !s.refusedKey {
		return
	}
	s.refusedKey = false
	if s.o.Health != nil {
		s.o.Health.SetCheck(keyCheck, nil)
	}
	s.o.Metrics.KeyRefused.Set(0)
	s.log.Info("the orchestrator accepts this agent's key again", "key_fingerprint", s.keyFingerprint())
}
