package api

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"
)

// The shape of an id DeriveID shortens: the first idHead and the last idTail characters around
// an idHash-character hash, 24 + 1 + 8 + 1 + 29 = 63 characters.
const (
	maxIDLength = 63
	idHead      = 24
	idHash      = 8
	idTail      = maxIDLength - idHead - idHash - 2
)

// DeriveID makes a valid id (ValidateID) out of any name, deterministically: the same name gives
// the same id in every release. It is meant for names that identify a cluster but are not ids,
// such as kube context names ("arn:aws:eks:eu-west-1:123456789012:cluster/prod",
// "gke_project_europe-west1_prod").
//
// Letters are lower-cased; every run of other characters than a-z and 0-9 becomes one '-', and
// '-' at either end is dropped. A result longer than 63 characters keeps at most its first 24 and
// its last 29 characters (the end of a context name is usually the cluster's own name), cut back to
// whole words between '-', around the first 8 hex digits of the SHA-256 of the whole name, so two
// long names that share a beginning or an end still get different ids. Names that differ only in
// the characters replaced by '-' give the same id. A name without a letter or digit is an error.
func DeriveID(name string) (string, error) {
	var b strings.Builder
	for _, r := range strings.ToLower(name) {
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9':
			b.WriteRune(r)
		case b.Len() > 0 && !strings.HasSuffix(b.String(), "-"):
			b.WriteByte('-')
		}
	}
	id := strings.TrimSuffix(b.String(), "-")
	if id == "" {
		return "", fieldErr("name", "%q has no letter or digit to make an id from", name)
	}
	if len(id) <= maxIDLength {
		return id, nil
	}
	sum := sha256.Sum256([]byte(name))
	head, tail := id[:idHead], id[len(id)-idTail:]
	if i := strings.LastIndexByte(head, '-'); i > 0 && id[idHead] != '-' {
		head = head[:i] // do not end in the middle of a word
	}
	if i := strings.IndexByte(tail, '-'); i >= 0 && i < len(tail)-1 && id[len(id)-idTail-1] != '-' {
		tail = tail[i+1:] // nor begin in one
	}
	head, tail = strings.TrimSuffix(head, "-"), strings.TrimPrefix(tail, "-")
	return head + "-" + hex.EncodeToString(sum[:])[:idHash] + "-" + tail, nil
}
