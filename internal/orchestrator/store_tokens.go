package orchestrator

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

// orgTokenRecord is an organisation token as stored.
type orgTokenRecord struct {
	api.OrgToken
	Org  string `json:"org"`
	Hash []byte `json:"hash"`
}

// tokenHash is what the store keeps of a token.
func tokenHash(token string) []byte {
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
	return api.OrgTokenPrefix + base64.RawURLEncoding.EncodeToString(secret), "tok-" + idEncoding.EncodeToString(idBytes), nil
}

// createOrgToken stores a new token of org and returns it, the only time it is ever returned.
func (s *store) createOrgToken(ctx context.Context, org string, in api.OrgTokenInput) (*api.CreatedOrgToken, error) {
	token, id, err := newOrgToken()
	if err != nil {
		return nil, err
	}
	var out *api.CreatedOrgToken
	err = s.update(ctx, func(tx storeTx) error {
		if err := tx.listDocs(kindOrgToken, org, func(v []byte) (bool, error) {
			var rec orgTokenRecord
			if err := unmarshal(v, &rec); err != nil {
				return false, err
			}
			if rec.Name == in.Name {
				return false, conflict("organisation %q already has a token named %q (%s); revoke it first or choose another name", org, in.Name, rec.ID)
			}
			return true, nil
		}); err != nil {
			return err
		}
		now := s.timeNow()
		rec := orgTokenRecord{OrgToken: api.OrgToken{ID: id, Name: in.Name, CreatedAt: now}, Org: org, Hash: tokenHash(token)}
		if err := tx.ensureOrg(org, now); err != nil {
			return err
		}
		out = &api.CreatedOrgToken{OrgToken: rec.OrgToken, Token: token}
		return tx.putOrgToken(&rec)
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// listOrgTokens lists org's tokens, oldest first.
func (s *store) listOrgTokens(ctx context.Context, org string) ([]api.OrgToken, error) {
	recs, err := listOrgObjects[orgTokenRecord](ctx, s, kindOrgToken, org)
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

// revokeOrgToken deletes a token; requests carrying it are refused from then on.
func (s *store) revokeOrgToken(ctx context.Context, org, id string) error {
	return s.update(ctx, func(tx storeTx) error {
		rec, err := getOrgObject[orgTokenRecord](tx, kindOrgToken, org, id, "organisation token")
		if err != nil {
			return err
		}
		return tx.deleteOrgToken(rec)
	})
}

// orgTokenByHash finds the token whose hash is h; nil when there is none.
func (s *store) orgTokenByHash(ctx context.Context, h []byte) (*orgTokenRecord, error) {
	var out *orgTokenRecord
	err := s.view(ctx, func(tx storeTx) error {
		var err error
		out, err = tx.orgTokenByHash(h)
		return err
	})
	return out, err
}
