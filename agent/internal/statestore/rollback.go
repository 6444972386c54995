package statestore

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
)

// RollbackOptions say who rolls a state back and why; both are recorded in the new version's
// Source, which the agent reports to the orchestrator.
type RollbackOptions struct {
	By, Reason string
}

// Rollback makes an old generation the state again, as a new generation whose serial follows the
// current one's (so the CLIs, which refuse to go back in serial within a lineage, take it as the
// newest state), written under the state's lock: it takes the lock as "admin/<By>", writes, and
// releases it. A state locked by anyone else is refused with a *LockedError (wait for the run,
// or break its lock with ForceUnlockFor first). An OpenTofu client-side encrypted state has no
// serial in clear and is refused: restore it with Restore instead.
func (s *Store) Rollback(ctx context.Context, key string, gen int64, o RollbackOptions) (Generation, error) {
	if o.By == "" || o.Reason == "" {
		return Generation{}, errors.New("a rollback names who asks for it and why")
	}
	old, _, err := s.ReadGeneration(ctx, key, gen)
	if err != nil {
		return Generation{}, err
	}
	cur, err := s.History(ctx, key)
	if err != nil {
		return Generation{}, err
	}
	if cur[0].ClientEncrypted {
		return Generation{}, fmt.Errorf("state %q: %w (no serial in clear); roll it back with `outpost-agent state restore`", key, ErrClientEncrypted)
	}
	body, err := withSerial(old, cur[0].Serial+1)
	if err != nil {
		return Generation{}, fmt.Errorf("state %q generation %d: %w", key, gen, err)
	}
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	info := LockInfo{ID: hex.EncodeToString(b), Operation: "OperationTypeApply", Info: "rollback: " + o.Reason, Who: o.By,
		Holder: "admin/" + o.By, Created: s.opts.Now().UTC()}
	if err := s.Lock(ctx, key, info); err != nil {
		return Generation{}, err
	}
	defer func() { _ = s.Unlock(context.WithoutCancel(ctx), key, info.ID, info.Holder) }()
	return s.WriteFrom(ctx, key, bytes.NewReader(body), WriteOptions{LockID: info.ID, Holder: info.Holder, Writer: info.Holder,
		Source: fmt.Sprintf("rollback to generation %d by %s: %s", gen, o.By, o.Reason)})
}

// withSerial returns the state document with its "serial" replaced; every other member keeps its
// bytes.
func withSerial(state []byte, serial int64) ([]byte, error) {
	var doc map[string]json.RawMessage
	if err := json.Unmarshal(state, &doc); err != nil {
		return nil, fmt.Errorf("not a state document: %w", err)
	}
	doc["serial"] = json.RawMessage(strconv.FormatInt(serial, 10))
	var out bytes.Buffer
	enc := json.NewEncoder(&out)
	enc.SetEscapeHTML(false) // values stay as the CLI wrote them, "<" included
	if err := enc.Encode(doc); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(out.Bytes(), []byte("\n")), nil
}
