//go:build !linux

package stateproxy

import (
	"syscall"
	"time"
)

// userTimeoutControl does nothing where TCP_USER_TIMEOUT does not exist: there, keepalive and the
// answer-head timeouts are the bounds. Job pods run on Linux.
func userTimeoutControl(time.Duration) func(network, address string, c syscall.RawConn) error {
	return nil
}
