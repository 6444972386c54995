package statestore

import (
	"encoding/json"
	"fmt"
	"strconv"
)

// StateMeta is what the store reads out of a state document: enough to show in listings and
// history, and to refuse bodies that are not states at all.
type StateMeta struct {
	// Version is the state format version ("version" in the JSON).
	Version int64
	// Lineage and Serial identify the state's history as Terraform sees it. They are empty/0
	// for an OpenTofu client-side encrypted state, whose envelope hides them.
	Lineage string
	Serial  int64
	// TerraformVersion is "terraform_version" (the CLI version that wrote it), if present.
	TerraformVersion string
	// ClientEncrypted is true for an OpenTofu state-encryption envelope (`encrypted_data`).
	ClientEncrypted bool
	// Resources is how many entries the top-level "resources" list has.
	Resources int64
}

// ParseState checks that body is a Terraform/OpenTofu state document and returns its metadata.
//
// Accepted: a JSON object with an integer "version", a non-empty string "lineage" and a
// non-negative integer "serial" (every state Terraform or OpenTofu writes), or an OpenTofu
// state-encryption envelope (a JSON object with "encrypted_data" and a non-empty
// "encryption_version"), which carries no lineage or serial in clear. Anything else — HTML from
// a misrouted proxy, an empty body, a truncated upload — is refused with ErrInvalidState, so a
// broken client can never replace a good state with garbage.
func ParseState(body []byte) (StateMeta, error) {
	sc := newStateScanner()
	_, _ = sc.Write(body)
	return sc.meta()
}

// meta is ParseState of the body the scanner has seen.
func (s *stateScanner) meta() (StateMeta, error) {
	members, err := s.Finish()
	if err != nil {
		return StateMeta{}, &InvalidStateError{Detail: err.Error()}
	}
	raw := func(name string) json.RawMessage { return members[name] }
	if isNull(raw("version")) && isNull(raw("lineage")) && isNull(raw("serial")) && !isNull(raw("encrypted_data")) {
		var ev string
		if err := json.Unmarshal(raw("encryption_version"), &ev); err != nil || ev == "" {
			return StateMeta{}, &InvalidStateError{Detail: `encrypted state envelope without a string "encryption_version"`}
		}
		return StateMeta{ClientEncrypted: true}, nil
	}
	var m StateMeta
	if m.Version, err = jsonInt(raw("version"), "version"); err != nil {
		return StateMeta{}, &InvalidStateError{Detail: err.Error()}
	}
	if m.Serial, err = jsonInt(raw("serial"), "serial"); err != nil {
		return StateMeta{}, &InvalidStateError{Detail: err.Error()}
	}
	if m.Serial < 0 {
		return StateMeta{}, &InvalidStateError{Detail: `"serial" is negative`}
	}
	if isNull(raw("lineage")) {
		return StateMeta{}, &InvalidStateError{Detail: `missing "lineage"`}
	}
	if err := json.Unmarshal(raw("lineage"), &m.Lineage); err != nil || m.Lineage == "" {
		return StateMeta{}, &InvalidStateError{Detail: `"lineage" is not a non-empty string`}
	}
	m.Resources = s.resources
	if tv := raw("terraform_version"); !isNull(tv) {
		_ = json.Unmarshal(tv, &m.TerraformVersion) // informational only
	}
	return m, nil
}

func isNull(raw json.RawMessage) bool { return len(raw) == 0 || string(raw) == "null" }

func jsonInt(raw json.RawMessage, name string) (int64, error) {
	if isNull(raw) {
		return 0, fmt.Errorf("missing %q", name)
	}
	n, err := strconv.ParseInt(string(raw), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%q is not an integer", name)
	}
	return n, nil
}
