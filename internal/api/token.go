package api

import (
	"regexp"
	"time"
)

// Organisation tokens: admin tokens that reach one organisation only. The orchestrator's
// bootstrap admin token creates, lists and revokes them; it never stores or shows a token's
// secret after the create that returned it.

// OrgTokenPrefix starts every organisation token, so a leaked one is recognisable in scanners
// and the orchestrator tells it from the bootstrap admin token without a lookup.
const OrgTokenPrefix = "opo_"

// OrgToken is an organisation token as listed: its id, name and creation time, never its secret.
type OrgToken struct {
	ID        string    `json:"id"`
	Name      string    `json:"name"`
	CreatedAt time.Time `json:"created_at"`
}

// OrgTokenInput is the body of an organisation token create.
type OrgTokenInput struct {
	// Name says who or what holds the token (e.g. "ci", "terraform-prod"); unique in the
	// organisation.
	Name string `json:"name"`
}

// CreatedOrgToken is the answer to an organisation token create: the only time the token itself
// is shown. The orchestrator keeps its SHA-256 hash alone.
type CreatedOrgToken struct {
	OrgToken
	Token string `json:"token"`
}

var tokenName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$`)

// Validate checks the token name.
func (in *OrgTokenInput) Validate() error {
	if !tokenName.MatchString(in.Name) {
		return fieldErr("name", "%q is not a token name: use 1 to 63 letters, digits, '.', '_' or '-', starting with a letter or digit", in.Name)
	}
	return nil
}
