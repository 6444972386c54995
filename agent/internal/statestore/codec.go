package statestore

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
)

const (
	// EncodingGzip is the only encoding written: the state JSON compressed as one gzip stream.
	EncodingGzip = "gzip"
	// EncryptionAESGCM marks chunks sealed with AES-256-GCM (see Options.EncryptionKey).
	EncryptionAESGCM = "aes-256-gcm"

	gcmNonceSize = 12
	gcmTagSize   = 16
)

func sha256Hex(b []byte) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// sealer encrypts and decrypts chunks with AES-256-GCM.
//
// Each chunk is sealed on its own with a fresh random nonce (stored in front of the ciphertext),
// so that chunks can be written and read in parallel and a damaged chunk is pinpointed. The
// additional authenticated data binds each chunk to its state, generation, index and the chunk
// count, so chunks cannot be swapped between states or generations, reordered, dropped from the
// end or replayed without the read failing authentication.
type sealer struct {
	aead  cipher.AEAD
	keyID string
}

func newSealer(key []byte) (*sealer, error) {
	if len(key) != 32 {
		return nil, fmt.Errorf("statestore: encryption key must be 32 bytes (AES-256), got %d", len(key))
	}
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, err
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		return nil, err
	}
	return &sealer{aead: aead, keyID: KeyID(key)}, nil
}

// KeyID names an encryption key without revealing it: the first 8 bytes (hex) of
// SHA-256("outpost-state-key-id\x00" || key). It is stored in the manifest so that a read with
// the wrong key fails with a clear message instead of an authentication error on every chunk.
func KeyID(key []byte) string {
	h := sha256.New()
	h.Write([]byte("outpost-state-key-id\x00"))
	h.Write(key)
	return hex.EncodeToString(h.Sum(nil)[:8])
}

// chunkAAD binds a chunk to its state, generation and position ("i/n", or "i/+" for a chunk
// more follow; see chunkPosition).
func chunkAAD(hash string, gen int64, position string) []byte {
	return []byte("outpost-state-v1\x00" + hash + "\x00" + strconv.FormatInt(gen, 10) + "\x00" +
		strings.Replace(position, "/", "\x00", 1))
}

func (s *sealer) seal(plain []byte, aad []byte) ([]byte, error) {
	out := make([]byte, gcmNonceSize, gcmNonceSize+len(plain)+gcmTagSize)
	if _, err := rand.Read(out); err != nil {
		return nil, err
	}
	return s.aead.Seal(out, out[:gcmNonceSize], plain, aad), nil
}

var errShortCiphertext = errors.New("ciphertext shorter than nonce and tag")

func (s *sealer) open(sealed []byte, aad []byte) ([]byte, error) {
	if len(sealed) < gcmNonceSize+gcmTagSize {
		return nil, errShortCiphertext
	}
	return s.aead.Open(nil, sealed[:gcmNonceSize], sealed[gcmNonceSize:], aad)
}
