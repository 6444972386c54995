package store

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"time"
)

// Console sessions: a browser signed in to the web console (package console) holds a random
// session cookie; the store keeps the SHA-256 of it with who signed in, in the engine, so every
// replica finds every session and a copy of the database holds no usable cookie.

// SessionScope is the organisation key all sessions are kept under (no organisation id can be
// empty); the session's own organisation is in its record.
const SessionScope = ""

// SessionRecord is a console session as stored.
type SessionRecord struct {
	// Org is the organisation the session shows; a session sees no other.
	Org string `json:"org"`
	// Admin is set when the bootstrap admin token signed in.
	Admin bool `json:"admin,omitempty"`
	// TokenHash is the SHA-256 of the organisation token that signed in (nil for the admin
	// token): a session of a revoked token ends with it.
	TokenHash []byte `json:"token_hash,omitempty"`
	// TokenID names the organisation token in logs.
	TokenID   string    `json:"token_id,omitempty"`
	CreatedAt time.Time `json:"created_at"`
	ExpiresAt time.Time `json:"expires_at"`
	// Key is what the session is stored under (sessionKey of its cookie), for the purge.
	Key string `json:"key"`
}

// sessionKey is what the store keeps a session under: the hex SHA-256 of its cookie.
func sessionKey(cookie string) string {
	sum := sha256.Sum256([]byte(cookie))
	return hex.EncodeToString(sum[:])
}

// CreateSession stores rec (its times set here, expiring after ttl) under a fresh random cookie
// and returns the cookie, the only time it exists outside the browser.
func (s *Store) CreateSession(ctx context.Context, rec SessionRecord, ttl time.Duration) (string, error) {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("generate session: %w", err)
	}
	cookie := base64.RawURLEncoding.EncodeToString(b)
	now := s.TimeNow()
	rec.CreatedAt, rec.ExpiresAt, rec.Key = now, now.Add(ttl), sessionKey(cookie)
	err := s.Update(ctx, func(tx Tx) error { return tx.PutDoc(KindSession, SessionScope, rec.Key, rec) })
	if err != nil {
		return "", err
	}
	return cookie, nil
}

// Session returns the unexpired session of a cookie; nil when there is none.
func (s *Store) Session(ctx context.Context, cookie string) (*SessionRecord, error) {
	var rec SessionRecord
	var ok bool
	err := s.view(ctx, func(tx Tx) (err error) {
		ok, err = tx.GetDoc(KindSession, SessionScope, sessionKey(cookie), &rec)
		return err
	})
	if err != nil || !ok || !s.TimeNow().Before(rec.ExpiresAt) {
		return nil, err
	}
	return &rec, nil
}

// DeleteSession ends the session of a cookie (sign-out); a cookie without one is no error.
func (s *Store) DeleteSession(ctx context.Context, cookie string) error {
	return s.Update(ctx, func(tx Tx) error { return tx.DeleteDoc(KindSession, SessionScope, sessionKey(cookie)) })
}

// PurgeSessions deletes up to budget sessions that expired and says how many it deleted.
func (s *Store) PurgeSessions(ctx context.Context, budget int) (int, error) {
	n := 0
	err := s.Update(ctx, func(tx Tx) error {
		now := s.TimeNow()
		var due []string
		err := tx.ListDocs(KindSession, SessionScope, func(data []byte) (bool, error) {
			var rec SessionRecord
			if err := Unmarshal(data, &rec); err != nil {
				return false, err
			}
			if !now.Before(rec.ExpiresAt) {
				due = append(due, rec.Key)
			}
			return len(due) < budget, nil
		})
		if err != nil {
			return err
		}
		for _, k := range due {
			if err := tx.DeleteDoc(KindSession, SessionScope, k); err != nil {
				return err
			}
		}
		n = len(due)
		return nil
	})
	return n, err
}
