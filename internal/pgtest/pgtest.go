// Package pgtest starts a throwaway PostgreSQL server for tests: Debian's server binaries (which
// scripts/postgres.sh installs), a cluster initialised in a temporary directory, listening on a
// free loopback port only, stopped and deleted by Stop. Each test then takes a schema of its own
// (Server.Schema), so tests in parallel never see each other's rows.
//
// Where PostgreSQL cannot be found, Start returns a reason to skip; under CI=true the caller
// must fail instead, as the test bed does.
//
// Restart and Crash stop the server the two ways a database goes away under its clients (a fast
// shutdown, and every server process killed at once) and start it again on the same data
// directory and port, for the tests of what the orchestrator does meanwhile.
package pgtest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/outpost-dev/terraform-provider-outpost/internal/porttest"
)

// ErrMissing says that PostgreSQL's server binaries are not installed.
var ErrMissing = errors.New("PostgreSQL's server binaries are not installed; run scripts/postgres.sh (as root it installs the Debian package postgresql)")

// Server is a running throwaway PostgreSQL server.
type Server struct {
	// URL is the connection URL of its database "outpost", as the superuser "outpost".
	URL string

	dir     string
	schemas atomic.Int64
	// bin, args and cred start the postgres process again (Restart, Crash).
	bin  string
	args []string
	cred *syscall.Credential
	cmd  *exec.Cmd
	// exited is closed when cmd has exited.
	exited chan struct{}
}

// BinDir finds the newest installed PostgreSQL server binaries.
func BinDir() (string, error) {
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	sort.Slice(dirs, func(i, j int) bool { return version(dirs[i]) < version(dirs[j]) })
	for i := len(dirs) - 1; i >= 0; i-- {
		if _, err := os.Stat(filepath.Join(dirs[i], "initdb")); err == nil {
			return dirs[i], nil
		}
	}
	return "", ErrMissing
}

func version(binDir string) int {
	n, _ := strconv.Atoi(filepath.Base(filepath.Dir(binDir)))
	return n
}

// Start initialises a cluster in a new temporary directory and starts it on a free loopback
// port, without durability (no fsync): it is thrown away after the tests. PostgreSQL refuses to
// run as root, so as root it runs as the user "postgres" that Debian's package creates.
func Start(ctx context.Context) (*Server, error) { return start(ctx, false) }

// StartDurable is Start with PostgreSQL's durability settings left on (fsync at commit), for
// measurements that compare it with a store that syncs.
func StartDurable(ctx context.Context) (*Server, error) { return start(ctx, true) }

func start(ctx context.Context, durable bool) (*Server, error) {
	bin, err := BinDir()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "outpost-pgtest-")
	if err != nil {
		return nil, err
	}
	s := &Server{dir: dir, bin: bin}
	if os.Geteuid() == 0 {
		u, err := user.Lookup("postgres")
		if err != nil {
			_ = os.RemoveAll(dir)
			return nil, fmt.Errorf("running as root, PostgreSQL needs the user postgres (Debian's package creates it): %w", err)
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		s.cred = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
		if err := os.Chown(dir, uid, gid); err != nil {
			_ = os.RemoveAll(dir)
			return nil, err
		}
	}
	data := filepath.Join(dir, "data")
	if out, err := s.command(ctx, "initdb", "-D", data, "-U", "outpost", "--auth=trust", "-E", "UTF8", "--locale=C.UTF-8", "--no-sync").CombinedOutput(); err != nil {
		_ = os.RemoveAll(dir)
		return nil, fmt.Errorf("initdb: %w: %s", err, out)
	}
	port, err := porttest.Port(ctx)
	if err != nil {
		_ = os.RemoveAll(dir)
		return nil, err
	}
	s.args = []string{"-D", data, "-p", strconv.Itoa(port), "-k", dir,
		"-c", "listen_addresses=127.0.0.1", "-c", "max_connections=300", "-c", "shared_buffers=64MB"}
	if !durable {
		s.args = append(s.args, "-c", "fsync=off", "-c", "synchronous_commit=off", "-c", "full_page_writes=off")
	}
	s.URL = fmt.Sprintf("postgres://outpost@127.0.0.1:%d/postgres?sslmode=disable", port)
	if err := s.launch(ctx); err != nil {
		s.Stop()
		return nil, err
	}
	return s, nil
}

// command is a PostgreSQL program of the server's installation, run as the user the server
// runs as.
func (s *Server) command(ctx context.Context, name string, args ...string) *exec.Cmd {
	c := exec.CommandContext(ctx, filepath.Join(s.bin, name), args...)
	// Setpgid: the server's processes form a group of their own, which Crash kills at once.
	c.SysProcAttr = &syscall.SysProcAttr{Credential: s.cred, Pdeathsig: syscall.SIGQUIT, Setpgid: true}
	c.Env = append(os.Environ(), "LC_ALL=C.UTF-8")
	return c
}

// launch starts the postgres process (appending to its log) and waits until it accepts
// connections.
func (s *Server) launch(ctx context.Context) error {
	log, err := os.OpenFile(filepath.Join(s.dir, "postgres.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	// The server outlives ctx (Stop ends it), so it is not started with it.
	cmd := s.command(context.WithoutCancel(ctx), "postgres", s.args...)
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		_ = log.Close()
		return fmt.Errorf("start postgres: %w", err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); _ = log.Close(); close(exited) }()
	s.cmd, s.exited = cmd, exited
	if err := s.waitReady(ctx); err != nil {
		tail, _ := os.ReadFile(filepath.Join(s.dir, "postgres.log"))
		return fmt.Errorf("%w; server log:\n%s", err, tail)
	}
	return nil
}

func (s *Server) waitReady(ctx context.Context) error {
	deadline := time.Now().Add(60 * time.Second)
	for {
		conn, err := pgx.Connect(ctx, s.URL)
		if err == nil {
			return conn.Close(ctx)
		}
		select {
		case <-s.exited:
			return errors.New("postgres exited while starting")
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("postgres did not accept connections within a minute: %w", err)
		}
	}
}

// Schema creates a new empty schema and returns a connection URL whose search_path is it, so
// everything created through that URL lands in it.
func (s *Server) Schema(ctx context.Context) (string, error) {
	name := fmt.Sprintf("t%d", s.schemas.Add(1))
	conn, err := pgx.Connect(ctx, s.URL)
	if err != nil {
		return "", err
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "CREATE SCHEMA "+name); err != nil {
		return "", err
	}
	u, _ := url.Parse(s.URL)
	q := u.Query()
	q.Set("search_path", name)
	u.RawQuery = q.Encode()
	return u.String(), nil
}

// Restart shuts the server down the way an orderly restart does (fast shutdown: SIGINT; every
// session is ended and its transaction rolled back) and starts it again on the same data
// directory and port. It returns once the server accepts connections again, with the time it
// was refusing them.
func (s *Server) Restart(ctx context.Context) (time.Duration, error) {
	began := time.Now()
	if err := s.shutdown(); err != nil {
		return 0, err
	}
	err := s.launch(ctx)
	return time.Since(began), err
}

// Crash kills every process of the server at once with SIGKILL, as the kernel's OOM killer or a
// lost node does, and starts it again on the same data directory and port: PostgreSQL recovers
// from its write-ahead log. It returns once the server accepts connections again, with the time
// it was refusing them.
func (s *Server) Crash(ctx context.Context) (time.Duration, error) {
	began := time.Now()
	if err := syscall.Kill(-s.cmd.Process.Pid, syscall.SIGKILL); err != nil {
		return 0, fmt.Errorf("kill the server's processes: %w", err)
	}
	<-s.exited
	// The postmaster is gone at once; its children may take a while (one killed in the middle
	// of an fsync ends when the write does), and a new postmaster refuses to start while any of
	// them still holds the shared memory ("pre-existing shared memory block is still in use"):
	// wait for them, and start again while it refuses.
	deadline := time.Now().Add(time.Minute)
	for groupAlive(s.cmd.Process.Pid) && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	for {
		err := s.launch(ctx)
		if err == nil || !strings.Contains(err.Error(), "still in use") || time.Now().After(deadline) {
			return time.Since(began), err
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// groupAlive reports whether a process of the process group pgid is still running. Zombies do
// not count: orphaned server processes are reparented to PID 1, which on some machines never
// reaps them, and a zombie holds no shared memory.
func groupAlive(pgid int) bool {
	stats, _ := filepath.Glob("/proc/[0-9]*/stat")
	for _, p := range stats {
		b, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		// pid (comm) state ppid pgrp ...; comm may hold spaces, so split after its ')'.
		i := bytes.LastIndexByte(b, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(string(b[i+1:]))
		if len(f) >= 3 && f[0] != "Z" && f[2] == strconv.Itoa(pgid) {
			return true
		}
	}
	return false
}

// shutdown stops the postgres process with SIGINT (fast shutdown) and waits for it, killing
// it after 20 s.
func (s *Server) shutdown() error {
	if s.cmd == nil || s.cmd.Process == nil {
		return nil
	}
	_ = s.cmd.Process.Signal(syscall.SIGINT)
	select {
	case <-s.exited:
		return nil
	case <-time.After(20 * time.Second):
		_ = syscall.Kill(-s.cmd.Process.Pid, syscall.SIGKILL)
		<-s.exited
		return errors.New("postgres did not shut down within 20 s of SIGINT; killed it")
	}
}

// Stop shuts the server down (fast shutdown, then kill after 20 s) and deletes its directory.
func (s *Server) Stop() {
	_ = s.shutdown()
	_ = os.RemoveAll(s.dir)
}
