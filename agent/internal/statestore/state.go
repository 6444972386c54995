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
	var doc struct {
		Version           json.RawMessage `json:"version"`
		Lineage           json.RawMessage `json:"lineage"`
		Serial            json.RawMessage `json:"serial"`
		TerraformVersion  json.RawMessage `json:"terraform_version"`
		EncryptedData     json.RawMessage `json:"encrypted_data"`
		EncryptionVersion json.RawMessage `json:"encryption_version"`
	}
	if len(body) == 0 {
		return StateMeta{}, &InvalidStateError{Detail: "empty body"}
	}
	if err := json.Unmarshal(body, &doc); err != nil {
		return StateMeta{}, &InvalidStateError{Detail: "not a JSON object: " + err.Error()}
	}
	if isNull(doc.Version) && isNull(doc.Lineage) && isNull(doc.Serial) && !isNull(doc.EncryptedData) {
		var ev string
		if err := json.Unmarshal(doc.EncryptionVersion, &ev); err != nil || ev == "" {
			return StateMeta{}, &InvalidStateError{Detail: `encrypted state envelope without a string "encryption_version"`}
		}
		return StateMeta{ClientEncrypted: true}, nil
	}
	var m StateMeta
	var err error
	if m.Version, err = jsonInt(doc.Version, "version"); err != nil {
		return StateMeta{}, &InvalidStateError{Detail: err.Error()}
	}
	if m.Serial, err = jsonInt(doc.Serial, "serial"); err != nil {
		return StateMeta{}, &InvalidStateError{Detail: err.Error()}
	}
	if m.Serial < 0 {
		return StateMeta{}, &InvalidStateError{Detail: `"serial" is negative`}
	}
	if isNull(doc.Lineage) {
		return StateMeta{}, &InvalidStateError{Detail: `missing "lineage"`}
	}
	if err := json.Unmarshal(doc.Lineage, &m.Lineage); err != nil || m.Lineage == "" {
		return StateMeta{}, &InvalidStateError{Detail: `"lineage" is not a non-empty string`}
	}
	if !isNull(doc.TerraformVersion) {
		_ = json.Unmarshal(doc.TerraformVersion, &m.TerraformVersion) // informational only
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
