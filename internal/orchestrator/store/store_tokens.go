package store

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"sort"

	"github.com/outpost-dev/terraform-provider-outpost/internal/api"
)

// Organisation tokens as stored: the record and the SHA-256 of the token, indexed by hash, so a
// request's token is found with one lookup and the token itself is never kept. A plain hash suffices (no slow password hash): the tokens are
// 256 random bits, which no dictionary or brute force reaches.

// OrgTokenRecord is an organisation token as stored.
type OrgTokenRecord struct {
	api.OrgToken
	Org  string `json:"org"`
	Hash []byte `json:"hash"`
}

// TokenHash is what the store keeps of a token.
func TokenHash(token string) []byte {
	sum := sha256.Sum256([]byte(token))
	return sum[:]
}

// newOrgToken returns a fresh token and its id.
func newOrgToken() (token, id string, err error) {
	secret, idBytes := make([]byte, 32), make([]byte, 8)
	if _, err := rand.Read(secret); err != nil {
		return "", "", fmt.Errorf("generate organisation token: %w", err)
	}
	if _, err := rand.Read(idBytes); err != nil {
		return "", "", fmt.Errorf("generate organisation token id: %w", err)
	}
	return api.OrgTokenPrefix + base64.RawURLEncoding.EncodeToString(secret), "tok-" + IDEncoding.EncodeToString(idBytes), nil
}

// CreateOrgToken stores a new token of org and returns it, the only time it is ever returned.
func (s *Store) CreateOrgToken(ctx context.Context, org string, in api.OrgTokenInput) (*api.CreatedOrgToken, error) {
	token, id, err := newOrgToken()
	if err != nil {
		return nil, err
	}
	var out *api.CreatedOrgToken
	err = s.Update(ctx, func(tx Tx) error {
		if err := tx.ListDocs(KindOrgToken, org, func(v []byte) (bool, error) {
			var rec OrgTokenRecord
			if err := Unmarshal(v, &rec); err != nil {
				return false, err
			}
			if rec.Name == in.Name {
				return false, conflict("organisation %q already has a token named %q (%s); revoke it first or choose another name", org, in.Name, rec.ID)
			}
			return true, nil
		}); err != nil {
			return err
		}
		now := s.TimeNow()
		rec := OrgTokenRecord{OrgToken: api.OrgToken{ID: id, Name: in.Name, CreatedAt: now}, Org: org, Hash: TokenHash(token)}
		if err := tx.EnsureOrg(org, now); err != nil {
			return err
		}
		out = &api.CreatedOrgToken{OrgToken: rec.OrgToken, Token: token}
		return tx.PutOrgToken(&rec)
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// ListOrgTokens lists org's tokens, oldest first.
func (s *Store) ListOrgTokens(ctx context.Context, org string) ([]api.OrgToken, error) {
	recs, err := listOrgObjects[OrgTokenRecord](ctx, s, KindOrgToken, org)
	if err != nil {
		return nil, err
	}
	out := make([]api.OrgToken, len(recs))
	for i, r := range recs {
		out[i] = r.OrgToken
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].CreatedAt.Before(out[j].CreatedAt) })
	return out, nil
}

// RevokeOrgToken deletes a token; requests carrying it are refused from then on.
func (s *Store) RevokeOrgToken(ctx context.Context, org, id string) error {
	return s.Update(ctx, func(tx Tx) error {
		rec, err := getOrgObject[OrgTokenRecord](tx, KindOrgToken, org, id, "organisation token")
		if err != nil {
			return err
		}
		return tx.DeleteOrgToken(rec)
	})
}

// OrgTokenByHash finds the token whose hash is h; nil when there is none.
func (s *Store) OrgTokenByHash(ctx context.Context, h []byte) (*OrgTokenRecord, error) {
	var out *OrgTokenRecord
	err := s.view(ctx, func(tx Tx) error {
		var err error
		out, err = tx.OrgTokenByHash(h)
		return err
	})
	return out, err
}
