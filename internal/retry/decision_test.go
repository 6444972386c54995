package retry

import (
	"errors"
	"fmt"
	"net"
	"os"
	"syscall"
	"testing"

	"github.com/outpost-dev/terraform-provider-outpost/internal/api"
)

func TestDecisions(t *testing.T) {
	status := func(code int) error { return fmt.Errorf("POST /x: %w", &api.Error{StatusCode: code}) }
	refused := fmt.Errorf("POST /x: %w", errors.Join(api.ErrUnavailable,
		&net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}))
	reset := fmt.Errorf("POST /x: %w", errors.Join(api.ErrUnavailable, &net.OpError{Op: "read", Net: "tcp", Err: syscall.ECONNRESET}))
	decode := errors.New("decode response of POST /x: unexpected end of JSON input")

	cases := []struct {
		name string
		err  error
		// idempotent, unapplied, eventually, whileTokenHolds
		want [4]bool
	}{
		{"400", status(400), [4]bool{false, false, false, false}},
		{"404", status(404), [4]bool{false, false, false, false}},
		{"409", status(409), [4]bool{false, false, false, false}},
		{"401", status(401), [4]bool{false, false, true, false}},
		{"403", status(403), [4]bool{false, false, true, false}},
		{"408", status(408), [4]bool{true, false, true, true}},
		{"429", status(429), [4]bool{true, true, true, true}},
		{"500", status(500), [4]bool{true, false, true, true}},
		{"503", status(503), [4]bool{true, true, true, true}},
		{"connection refused", refused, [4]bool{true, true, true, true}},
		{"connection reset", reset, [4]bool{true, false, true, true}},
		{"undecodable answer", decode, [4]bool{false, false, true, true}},
	}
	for _, tc := range cases {
		got := [4]bool{Idempotent(tc.err), Unapplied(tc.err), Eventually(tc.err), WhileTokenHolds(tc.err)}
		if got != tc.want {
			t.Errorf("%s: (Idempotent, Unapplied, Eventually, WhileTokenHolds) = %v, want %v", tc.name, got, tc.want)
		}
	}
}
