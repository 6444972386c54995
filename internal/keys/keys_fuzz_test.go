package keys

import (
	"bytes"
	"crypto/ed25519"
	"encoding/pem"
	"errors"
	"strings"
	"testing"

	"golang.org/x/crypto/ssh"
)

// FuzzParsePublicPEM feeds ParsePublicPEM what people paste into public_keys. A key it accepts
// is an ed25519 key whose PEM, OpenSSH and fingerprint forms all name the same key, and the
// accepted text carries nothing but that one PEM block: no private key, no other text (the
// orchestrator stores and shows the text as given, so anything around the key would travel too).
// Seeds: testdata/fuzz/FuzzParsePublicPEM (RFC 8410's example keys, a PKCS#8 key pasted as a
// public key, a broken private block in front of a public one, headers, OpenSSH form).
func FuzzParsePublicPEM(f *testing.F) {
	f.Fuzz(func(t *testing.T, s string) {
		pub, err := ParsePublicPEM(s)
		if err != nil {
			if pub != nil {
				t.Fatalf("error %v came with a key", err)
			}
			if strings.Contains(s, "PRIVATE KEY-----") && pemBlockOfType(s, "PRIVATE KEY") && !errors.Is(err, ErrPrivateKeyGiven) {
				t.Fatalf("a private key block was refused with %q, not ErrPrivateKeyGiven", err)
			}
			return
		}
		if len(pub) != ed25519.PublicKeySize {
			t.Fatalf("accepted a %d-byte key", len(pub))
		}
		if strings.Contains(s, "PRIVATE KEY") {
			t.Fatalf("accepted text that mentions a private key: %q", s)
		}
		trimmed := strings.TrimSpace(s)
		if !strings.HasPrefix(trimmed, "-----BEGIN PUBLIC KEY-----") || !strings.HasSuffix(trimmed, "-----END PUBLIC KEY-----") {
			t.Fatalf("accepted text with more than the PUBLIC KEY block: %q", s)
		}
		block, _ := pem.Decode([]byte(trimmed))
		if len(block.Headers) != 0 {
			t.Fatalf("accepted a block with headers %v", block.Headers)
		}
		checkEncodings(t, pub)
	})
}

// checkEncodings checks that every form of an accepted key names it: the canonical PEM parses
// back to it, the OpenSSH form parses to the same key, and both fingerprints agree.
func checkEncodings(t *testing.T, pub ed25519.PublicKey) {
	t.Helper()
	canonical, err := EncodePublicPEM(pub)
	if err != nil {
		t.Fatal(err)
	}
	again, err := ParsePublicPEM(canonical)
	if err != nil || !again.Equal(pub) {
		t.Fatalf("canonical PEM of an accepted key does not parse back: %v", err)
	}
	authorized, err := OpenSSH(pub)
	if err != nil {
		t.Fatal(err)
	}
	sshPub, _, _, rest, err := ssh.ParseAuthorizedKey([]byte(authorized))
	if err != nil || len(rest) != 0 {
		t.Fatalf("OpenSSH form %q does not parse: %v", authorized, err)
	}
	cp, ok := sshPub.(ssh.CryptoPublicKey)
	if !ok {
		t.Fatalf("OpenSSH form parses to %T", sshPub)
	}
	if back, ok := cp.CryptoPublicKey().(ed25519.PublicKey); !ok || !bytes.Equal(back, pub) {
		t.Fatal("OpenSSH form names another key")
	}
	fp := Fingerprint(pub)
	if fp != ssh.FingerprintSHA256(sshPub) || len(fp) != len("SHA256:")+43 {
		t.Fatalf("fingerprint %q, ssh-keygen would print %q", fp, ssh.FingerprintSHA256(sshPub))
	}
}

// pemBlockOfType reports whether any PEM block in s has a type containing typ.
func pemBlockOfType(s, typ string) bool {
	rest := []byte(s)
	for {
		var b *pem.Block
		b, rest = pem.Decode(rest)
		if b == nil {
			return false
		}
		if strings.Contains(b.Type, typ) {
			return true
		}
	}
}

// FuzzParsePrivatePEM feeds ParsePrivatePEM what a key Secret could hold. An accepted key is a
// consistent ed25519 key pair: its public half is the one its seed derives, and signatures made
// with it verify.
func FuzzParsePrivatePEM(f *testing.F) {
	f.Fuzz(func(t *testing.T, b []byte) {
		priv, err := ParsePrivatePEM(b)
		if err != nil {
			if priv != nil {
				t.Fatalf("error %v came with a key", err)
			}
			return
		}
		if len(priv) != ed25519.PrivateKeySize {
			t.Fatalf("accepted a %d-byte key", len(priv))
		}
		derived := ed25519.NewKeyFromSeed(priv.Seed())
		if !derived.Equal(priv) {
			t.Fatal("accepted a key whose public half is not the one its seed derives")
		}
		pub, ok := priv.Public().(ed25519.PublicKey)
		if !ok {
			t.Fatal("public half is not an ed25519 key")
		}
		msg := []byte("outpost")
		if !ed25519.Verify(pub, msg, ed25519.Sign(priv, msg)) {
			t.Fatal("signature of an accepted key does not verify")
		}
		canonical, err := EncodePrivatePEM(priv)
		if err != nil {
			t.Fatal(err)
		}
		again, err := ParsePrivatePEM([]byte(canonical))
		if err != nil || !again.Equal(priv) {
			t.Fatalf("canonical PEM of an accepted key does not parse back: %v", err)
		}
		checkEncodings(t, pub)
	})
}
