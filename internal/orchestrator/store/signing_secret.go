package store

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
)

// SigningSecretFile is the file in the data directory that holds the secret signing job tokens,
// unless Config.SigningSecretFile names another.
const SigningSecretFile = "signing-secret"

// signingSecretBytes is the length of a generated secret; a file may hold a longer one.
const SigningSecretBytes = 32

// LegacySecrets is the part of a store that may still hold the secret of an older orchestrator.
// A store that never kept it (a new backend) passes nil to openSigningSecret.
type LegacySecrets interface {
	// LegacySecret returns the secret kept in the database, or nil.
	LegacySecret() ([]byte, error)
	// DropLegacySecret removes it from the database.
	DropLegacySecret() error
}

// OpenSigningSecret returns the secret signing job tokens, kept in path (hex, mode 0600) apart
// from the database: a database backup or a copy of the file then mints nothing. On first start
// the secret is generated and the file created atomically. An older database's secret moves to
// the file (written first, then dropped from the database, so a crash in between loses
// nothing), so job tokens issued before keep working.
func OpenSigningSecret(path string, legacy LegacySecrets, log *slog.Logger) ([]byte, error) {
	var old []byte
	if legacy != nil {
		var err error
		if old, err = legacy.LegacySecret(); err != nil {
			return nil, fmt.Errorf("read the signing secret kept in the database: %w", err)
		}
	}
	secret, err := ReadSigningSecret(path, log)
	switch {
	case err == nil:
		if old != nil && !bytes.Equal(old, secret) {
			log.Warn("the signing secret file differs from the secret the database kept; job tokens issued before are no longer valid (running jobs fail and are retried)", "file", path)
		}
	case errors.Is(err, fs.ErrNotExist):
		created := old
		if created == nil {
			created = make([]byte, SigningSecretBytes)
			if _, err := rand.Read(created); err != nil {
				return nil, fmt.Errorf("generate the signing secret: %w", err)
			}
		}
		if secret, err = createSigningSecret(path, created, log); err != nil {
			return nil, err
		}
		if old != nil && bytes.Equal(secret, old) {
			log.Info("moved the signing secret out of the database into its own file", "file", path)
		}
	default:
		return nil, err
	}
	if old != nil {
		if err := legacy.DropLegacySecret(); err != nil {
			return nil, fmt.Errorf("remove the signing secret from the database (it is in %s now): %w", path, err)
		}
	}
	return secret, nil
}

// ReadSigningSecret reads a secret file: hex, at least signingSecretBytes bytes.
func ReadSigningSecret(path string, log *slog.Logger) ([]byte, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, err
		}
		return nil, fmt.Errorf("read the signing secret %s: %w (check --signing-secret-file)", path, err)
	}
	secret, err := hex.DecodeString(strings.TrimSpace(string(b)))
	if err != nil || len(secret) < SigningSecretBytes {
		return nil, fmt.Errorf("signing secret %s must hold at least %d random bytes in hex (e.g. openssl rand -hex %d); delete it to have one generated, which ends the job tokens of running jobs", path, SigningSecretBytes, SigningSecretBytes)
	}
	if st, err := os.Stat(path); err == nil && st.Mode().Perm()&0o077 != 0 {
		log.Warn("the signing secret file is readable by other users; whoever reads it can mint job tokens (chmod 600, or defaultMode 0400 on a Secret volume)", "file", path, "mode", st.Mode().Perm().String())
	}
	return secret, nil
}

// createSigningSecret writes secret to path without ever exposing a partial file, and never
// replaces a file that appeared in the meantime: it is written and synced under a temporary
// name, then linked into place. It returns the secret the file holds.
func createSigningSecret(path string, secret []byte, log *slog.Logger) ([]byte, error) {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("create the directory of the signing secret %s: %w", path, err)
	}
	tmp, err := os.CreateTemp(dir, ".signing-secret-*")
	if err != nil {
		return nil, fmt.Errorf("create the signing secret %s: %w (the directory must be writable on first start, or the file must exist)", path, err)
	}
	defer os.Remove(tmp.Name())
	_, err = tmp.WriteString(hex.EncodeToString(secret) + "\n")
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Link(tmp.Name(), path)
	}
	if errors.Is(err, fs.ErrExist) {
		return ReadSigningSecret(path, log)
	}
	if err != nil {
		return nil, fmt.Errorf("write the signing secret %s: %w", path, err)
	}
	if d, err := os.Open(dir); err == nil {
		_ = d.Sync()
		_ = d.Close()
	}
	log.Info("created the signing secret of job tokens", "file", path)
	return secret, nil
}
