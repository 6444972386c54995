//go:build linux

package stateproxy

import (
	"bytes"
	"context"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"log/slog"
	"net"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/outpost-dev/terraform-provider-outpost/internal/netnstest"
)

// bypassEnv=1 points the CLI at the Service directly instead of at the proxy: the CLI's state
// write then waits on the dead connection until the kernel gives up (about 15 minutes), which
// is what the proxy is for. Set it to see that the test fails without the proxy.
const bypassEnv = "OUTPOST_STATEPROXY_BYPASS"

// TestDeadPeerFailsOverWithTheCLI runs the real terraform CLI through the proxy against two
// replicas of a state backend behind a Service (iptables DNAT in the test's own network
// namespace, alternating new connections between them, as kube-proxy spreads them). During an
// apply one replica goes dead: every packet to and from it is dropped, so nothing answers and
// nothing resets (its node was lost). The apply must still end, its state written by the live
// replica and its lock released, within 45 s of the loss:
//
//   - between: the replica that served the apply's lock and read is lost while the apply runs
//     (an 8 s command); the state write at the end must not wait on the connection to it;
//   - during: the replica that receives the state write stores it and is lost before its answer
//     gets out; the proxy gives the connection up within TCP_USER_TIMEOUT (15 s), answers 502,
//     and the CLI sends the write again, which the live replica stores once more (the same
//     state: a repeated write is harmless, see the package documentation).
//
// Without the proxy (OUTPOST_STATEPROXY_BYPASS=1) the CLI waits on the dead connection for
// minutes (between: about 15, until tcp_retries2 gives up) and the test fails at 90 s.
func TestDeadPeerFailsOverWithTheCLI(t *testing.T) {
	tf := "/usr/local/bin/terraform"
	if _, err := os.Stat(tf); err != nil {
		t.Fatalf("this test runs the real terraform CLI at %s: %v", tf, err)
	}
	if !netnstest.Enter(t) {
		return
	}
	for _, when := range []string{"between", "during"} {
		t.Run(when, func(t *testing.T) { loseReplica(t, tf, when) })
	}
}

// loseReplica is one case of TestDeadPeerFailsOverWithTheCLI.
func loseReplica(t *testing.T, tf, when string) {
	ctx := t.Context()
	b := &backend{}
	replicas := map[string]*httptest.Server{}
	ports := map[string]string{}
	for _, name := range []string{"a", "b"} {
		srv := httptest.NewTLSServer(b.handler(name))
		defer srv.Close()
		replicas[name] = srv
		_, ports[name], _ = net.SplitHostPort(srv.Listener.Addr().String())
	}
	// The Service: nothing listens on its port; connections to it go to a and b in turn.
	service := closedPort(t)
	_, svcPort, _ := net.SplitHostPort(service)
	netnstest.Iptables(t, "-t", "nat", "-A", "OUTPUT", "-p", "tcp", "-d", "127.0.0.1", "--dport", svcPort,
		"-m", "statistic", "--mode", "nth", "--every", "2", "--packet", "0", "-j", "DNAT", "--to-destination", "127.0.0.1:"+ports["a"])
	netnstest.Iptables(t, "-t", "nat", "-A", "OUTPUT", "-p", "tcp", "-d", "127.0.0.1", "--dport", svcPort, "-j", "DNAT", "--to-destination", "127.0.0.1:"+ports["b"])
	var lost time.Time
	var dead string
	lose := func(name string) {
		netnstest.Lose(t, ports[name])
		lost, dead = time.Now(), name
	}

	// Both replicas present httptest's certificate, which names 127.0.0.1: the state CA here.
	caPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: replicas["a"].Certificate().Raw})
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(caPEM)
	upstream := "https://" + service
	backendURL := upstream
	env := append(os.Environ(), "TF_IN_AUTOMATION=1", "TF_INPUT=0", "CHECKPOINT_DISABLE=1",
		"TF_HTTP_USERNAME="+testUser, "TF_HTTP_PASSWORD="+testPassword)
	if os.Getenv(bypassEnv) == "1" {
		env = append(env, "TF_HTTP_CLIENT_CA_CERTIFICATE_PEM="+string(caPEM))
		t.Logf("%s=1: the CLI talks to the Service directly", bypassEnv)
	} else {
		proxy, err := Start(t.Context(), Options{Upstream: upstream, RootCAs: roots, Log: slog.New(slog.NewTextHandler(testWriter{t}, nil))})
		if err != nil {
			t.Fatal(err)
		}
		defer proxy.Close()
		backendURL = proxy.URL()
	}

	dir := t.TempDir()
	addr := backendURL + "/v1/states/app"
	config := fmt.Sprintf(`terraform {
  backend "http" {
    address        = %[1]q
    lock_address   = %[1]q
    unlock_address = %[1]q
    lock_method    = "LOCK"
    unlock_method  = "UNLOCK"
    update_method  = "POST"
    retry_max      = 10
    retry_wait_min = 1
    retry_wait_max = 30
  }
}

resource "terraform_data" "slow" {
  input = "written after the loss"

  provisioner "local-exec" {
    command = "sleep 8"
  }
}
`, addr)
	if err := os.WriteFile(filepath.Join(dir, "main.tf"), []byte(config), 0o600); err != nil {
		t.Fatal(err)
	}
	cli := func(ctx context.Context, args ...string) *exec.Cmd {
		cmd := exec.CommandContext(ctx, tf, args...) //nolint:gosec // the test's own CLI and arguments
		cmd.Dir, cmd.Env = dir, env
		return cmd
	}
	if out, err := cli(ctx, "init", "-input=false", "-no-color").CombinedOutput(); err != nil {
		t.Fatalf("terraform init: %v\n%s", err, out)
	}

	before := len(b.served())
	if when == "during" {
		b.mu.Lock()
		b.written = func(name string) {
			if dead == "" {
				lose(name)
			}
		}
		b.mu.Unlock()
	}
	applyCtx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	apply := cli(applyCtx, "apply", "-auto-approve", "-input=false", "-no-color")
	var out bytes.Buffer
	apply.Stdout, apply.Stderr = &out, &out
	if err := apply.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- apply.Wait() }()

	// Wait for the apply's lock and read, then (between) lose the replica that served them, or
	// (during) for the loss the backend's write hook makes.
	for {
		ops := b.served()[before:]
		if when == "between" {
			for i := 0; i+1 < len(ops) && dead == ""; i++ {
				if strings.HasSuffix(ops[i], " LOCK") && ops[i+1] == strings.TrimSuffix(ops[i], "LOCK")+"GET" {
					lose(strings.Fields(ops[i])[0])
				}
			}
		}
		b.mu.Lock()
		gone := dead != ""
		b.mu.Unlock()
		if gone {
			break
		}
		select {
		case err := <-exited:
			t.Fatalf("terraform apply ended before a replica was lost: %v\n%s", err, out.String())
		case <-time.After(50 * time.Millisecond):
		}
	}
	b.mu.Lock()
	t.Logf("replica %s lost after the apply's %v", dead, b.ops[before:])
	b.mu.Unlock()

	const bound = 45 * time.Second
	var err error
	select {
	case err = <-exited:
	case <-time.After(90 * time.Second):
		cancel()
		t.Logf("terraform apply stopped: %v", <-exited)
		t.Fatalf("terraform apply still running 90 s after replica %s was lost (want it done within %s); backend saw %v\n%s",
			dead, bound, b.served()[before:], out.String())
	}
	took := time.Since(lost)
	if err != nil {
		t.Fatalf("terraform apply: %v\n%s", err, out.String())
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	var seen []string
	var wroteLive bool
	for i, op := range b.ops[before:] {
		seen = append(seen, fmt.Sprintf("%s at %+.1fs", op, b.at[before+i].Sub(lost).Seconds()))
		wroteLive = wroteLive || (op != dead+" POST" && strings.HasSuffix(op, " POST"))
	}
	t.Logf("terraform apply ended %s after replica %s was lost; the backend served %s", took.Round(100*time.Millisecond), dead, strings.Join(seen, ", "))
	if took > bound {
		t.Errorf("the apply took %s after the loss, want at most %s", took.Round(100*time.Millisecond), bound)
	}
	if !wroteLive || !bytes.Contains(b.state, []byte("written after the loss")) || b.lockID != "" {
		t.Errorf("want the state written by the live replica and the lock released; state %q, lock %q", b.state, b.lockID)
	}
}

// testWriter writes log lines into the test's log.
type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}
