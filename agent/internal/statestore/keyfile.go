package statestore

import (
	"encoding/base64"
	"errors"
	"fmt"
	"os"
	"strings"
)

// ReadKeyFile reads a state encryption key: exactly 32 bytes, given raw or as standard base64
// (what `openssl rand -base64 32` prints). Nil without a path.
func ReadKeyFile(path string) ([]byte, error) {
	if path == "" {
		return nil, nil
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("cannot read %s: %w", path, errors.Unwrap(err))
	}
	if len(data) == 32 {
		return data, nil
	}
	if key, err := base64.StdEncoding.DecodeString(strings.TrimSpace(string(data))); err == nil && len(key) == 32 {
		return key, nil
	}
	return nil, fmt.Errorf("%s must hold a 32-byte key, raw or base64 (create one with `openssl rand -base64 32`); it holds %d bytes", path, len(data))
}
