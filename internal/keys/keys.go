// Package keys handles the ed25519 key pairs that identify a runner's agent: generation, PEM and
// OpenSSH encodings, parsing with errors that tell a user what they pasted, and fingerprints.
//
// The fingerprint format ("SHA256:" + unpadded base64 of the SHA-256 of the SSH wire encoding) is
// the one `ssh-keygen -l` prints, so operators can compare keys with tools they already have.
package keys

import (
	"crypto/ed25519"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/pem"
	"errors"
	"fmt"
	"strings"

	"golang.org/x/crypto/ssh"
)

// The data keys of a runner's key Secret, written by outpost_key_pair and read by the agent.
const (
	// SecretKeyPrivate holds the runner's private key (PKCS#8 PEM); the chart's
	// privateKey.secretKey defaults to it.
	SecretKeyPrivate = "private-key.pem"
	// SecretKeyPrevious holds the private key the current one replaced at the last rotation: the
	// agent still recognises the Jobs it sealed, and the state credentials it made, with it.
	SecretKeyPrevious = "previous-private-key.pem"
)

// ErrNotPEM is returned when the input holds no PEM block at all.
var ErrNotPEM = errors.New("not a PEM-encoded key: expected a block starting with -----BEGIN PUBLIC KEY-----")

// ErrPrivateKeyGiven is returned when a private key is given where a public key is expected. It
// has its own error because pasting the wrong half is the most common mistake and leaks a secret.
var ErrPrivateKeyGiven = errors.New("this is a PRIVATE key; give the PUBLIC key (-----BEGIN PUBLIC KEY-----) here and keep the private key in the cluster")

// ErrNotEd25519 is returned for a well-formed public key of another algorithm.
var ErrNotEd25519 = errors.New("not an ed25519 public key: Outpost runners accept ed25519 keys only")

// Generate creates a new ed25519 key pair from the system's secure random source.
func Generate() (ed25519.PublicKey, ed25519.PrivateKey, error) {
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return nil, nil, fmt.Errorf("generate ed25519 key: %w", err)
	}
	return pub, priv, nil
}

// EncodePublicPEM encodes a public key as a PKIX "PUBLIC KEY" PEM block.
func EncodePublicPEM(pub ed25519.PublicKey) (string, error) {
	der, err := x509.MarshalPKIXPublicKey(pub)
	if err != nil {
		return "", fmt.Errorf("marshal public key: %w", err)
	}
	return string(pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der})), nil
}

// EncodePrivatePEM encodes a private key as a PKCS#8 "PRIVATE KEY" PEM block, the form the agent
// reads from its mounted Secret.
func EncodePrivatePEM(priv ed25519.PrivateKey) (string, error) {
	der, err := x509.MarshalPKCS8PrivateKey(priv)
	if err != nil {
		return "", fmt.Errorf("marshal private key: %w", err)
	}
	return string(pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der})), nil
}

// ParsePublicPEM parses a PKIX PEM public key and requires ed25519. The text must be that one
// PEM block and nothing else: callers store and show it as given, so a private key (even one
// too mangled to decode, which pem.Decode would skip) or any other text around the key would
// travel with it.
func ParsePublicPEM(s string) (ed25519.PublicKey, error) {
	text := strings.TrimSpace(s)
	if strings.Contains(text, "PRIVATE KEY") {
		return nil, ErrPrivateKeyGiven
	}
	block, rest := pem.Decode([]byte(text))
	if block == nil {
		if strings.HasPrefix(text, "ssh-") {
			return nil, fmt.Errorf("%w (this looks like an OpenSSH key; give the PEM form)", ErrNotPEM)
		}
		return nil, ErrNotPEM
	}
	if block.Type != "PUBLIC KEY" {
		return nil, fmt.Errorf("%w (found a %q block)", ErrNotPEM, block.Type)
	}
	// pem.Decode skips text it cannot decode, BEGIN lines included: the block it found must
	// be the only one and start the text.
	if strings.Count(text, "-----BEGIN") > 1 {
		return nil, errors.New("more than one PEM block: give exactly one public key per entry")
	}
	if !strings.HasPrefix(text, "-----BEGIN") {
		return nil, errors.New("text before -----BEGIN PUBLIC KEY-----: give only the PEM block, from its BEGIN line to its END line")
	}
	if len(block.Headers) > 0 {
		return nil, errors.New("the PEM block has header lines (\"Name: value\"); a public key has none: give the key as ssh-keygen, openssl or the outpost_key_pair resource print it")
	}
	if len(strings.TrimSpace(string(rest))) > 0 {
		return nil, errors.New("more than one PEM block: give exactly one public key per entry")
	}
	key, err := x509.ParsePKIXPublicKey(block.Bytes)
	if err != nil {
		return nil, fmt.Errorf("invalid public key: %w", err)
	}
	pub, ok := key.(ed25519.PublicKey)
	if !ok {
		return nil, fmt.Errorf("%w (got %T)", ErrNotEd25519, key)
	}
	return pub, nil
}

// ParsePrivatePEM parses a PKCS#8 PEM ed25519 private key.
func ParsePrivatePEM(b []byte) (ed25519.PrivateKey, error) {
	block, _ := pem.Decode(b)
	if block == nil {
		return nil, errors.New("not a PEM-encoded private key: expected -----BEGIN PRIVATE KEY-----")
	}
	if block.Type != "PRIVATE KEY" {
		return nil, fmt.Errorf("expected a PKCS#8 \"PRIVATE KEY\" PEM block, found %q", block.Type)
	}
	key, err := x509.ParsePKCS8PrivateKey(block.Bytes)
	if err != nil {
		return nil, fmt.Errorf("invalid private key: %w", err)
	}
	priv, ok := key.(ed25519.PrivateKey)
	if !ok {
		return nil, fmt.Errorf("not an ed25519 private key (got %T)", key)
	}
	return priv, nil
}

// OpenSSH returns the public key in authorized_keys form ("ssh-ed25519 AAAA...").
func OpenSSH(pub ed25519.PublicKey) (string, error) {
	sshPub, err := ssh.NewPublicKey(pub)
	if err != nil {
		return "", fmt.Errorf("encode OpenSSH public key: %w", err)
	}
	return strings.TrimSpace(string(ssh.MarshalAuthorizedKey(sshPub))), nil
}

// Fingerprint returns the SHA-256 fingerprint in the format ssh-keygen prints.
func Fingerprint(pub ed25519.PublicKey) string {
	sshPub, err := ssh.NewPublicKey(pub)
	if err != nil {
		// ed25519 keys of the right length always convert; a wrong length is a caller bug.
		sum := sha256.Sum256(pub)
		return "SHA256:" + base64.RawStdEncoding.EncodeToString(sum[:])
	}
	return ssh.FingerprintSHA256(sshPub)
}
