package keys

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"strings"
	"testing"
)

func TestRoundTrip(t *testing.T) {
	pub, priv, err := Generate()
	if err != nil {
		t.Fatal(err)
	}
	pubPEM, err := EncodePublicPEM(pub)
	if err != nil {
		t.Fatal(err)
	}
	got, err := ParsePublicPEM(pubPEM)
	if err != nil {
		t.Fatalf("parse public: %v", err)
	}
	if !got.Equal(pub) {
		t.Fatal("public key changed in PEM round trip")
	}
	privPEM, err := EncodePrivatePEM(priv)
	if err != nil {
		t.Fatal(err)
	}
	gotPriv, err := ParsePrivatePEM([]byte(privPEM))
	if err != nil {
		t.Fatalf("parse private: %v", err)
	}
	if !gotPriv.Equal(priv) {
		t.Fatal("private key changed in PEM round trip")
	}
	ssh, err := OpenSSH(pub)
	if err != nil || !strings.HasPrefix(ssh, "ssh-ed25519 AAAA") {
		t.Fatalf("OpenSSH = %q, %v", ssh, err)
	}
	fp := Fingerprint(pub)
	if !strings.HasPrefix(fp, "SHA256:") || len(fp) != len("SHA256:")+43 {
		t.Fatalf("fingerprint %q has the wrong shape", fp)
	}
}

func TestParsePublicPEMErrors(t *testing.T) {
	_, priv, _ := Generate()
	privPEM, _ := EncodePrivatePEM(priv)
	ecKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	ecDER, _ := x509.MarshalPKIXPublicKey(&ecKey.PublicKey)
	ecPEM := string(pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: ecDER}))
	pub, _, _ := Generate()
	pubPEM, _ := EncodePublicPEM(pub)
	sshKey, _ := OpenSSH(pub)

	cases := map[string]struct {
		in      string
		wantErr error
		wantMsg string
	}{
		"empty":        {in: "", wantErr: ErrNotPEM},
		"private key":  {in: privPEM, wantErr: ErrPrivateKeyGiven},
		"ecdsa":        {in: ecPEM, wantErr: ErrNotEd25519},
		"openssh form": {in: sshKey, wantErr: ErrNotPEM, wantMsg: "OpenSSH"},
		"two keys":     {in: pubPEM + pubPEM, wantMsg: "more than one PEM block"},
		"garbage body": {in: "-----BEGIN PUBLIC KEY-----\nAAAA\n-----END PUBLIC KEY-----\n", wantMsg: "invalid public key"},
		// pem.Decode skips what it cannot decode, so a mangled private key in front of the
		// public one used to be accepted and stored with it (found by FuzzParsePublicPEM).
		"mangled private key before": {in: "-----BEGIN PRIVATE KEY-----\nMC4CAQAw\n-----END PRIVATE KEY--\n" + pubPEM, wantErr: ErrPrivateKeyGiven},
		"private key after":          {in: pubPEM + privPEM, wantErr: ErrPrivateKeyGiven},
		"text before":                {in: "my key:\n" + pubPEM, wantMsg: "text before"},
		"headers":                    {in: strings.Replace(pubPEM, "-----\n", "-----\nComment: x\n\n", 1), wantMsg: "header lines"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			_, err := ParsePublicPEM(tc.in)
			if err == nil {
				t.Fatal("expected an error")
			}
			if tc.wantErr != nil && !errors.Is(err, tc.wantErr) {
				t.Fatalf("error %v is not %v", err, tc.wantErr)
			}
			if tc.wantMsg != "" && !strings.Contains(err.Error(), tc.wantMsg) {
				t.Fatalf("error %q does not mention %q", err, tc.wantMsg)
			}
		})
	}
}
