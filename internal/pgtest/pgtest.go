// Package pgtest starts a throwaway PostgreSQL server for tests: Debian's server binaries (which
// scripts/postgres.sh installs), a cluster initialised in a temporary directory, listening on a
// free loopback port only, stopped and deleted by Stop. Each test then takes a schema of its own
// (Server.Schema), so tests in parallel never see each other's rows.
//
// Where PostgreSQL cannot be found, Start returns a reason to skip; under CI=true the caller
// must fail instead, as the test bed does.
package pgtest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
)

// ErrMissing says that PostgreSQL's server binaries are not installed.
var ErrMissing = errors.New("PostgreSQL's server binaries are not installed; run scripts/postgres.sh (as root it installs the Debian package postgresql)")

// Server is a running throwaway PostgreSQL server.
type Server struct {
	// URL is the connection URL of its database "outpost", as the superuser "outpost".
	URL string

	dir     string
	cmd     *exec.Cmd
	exited  chan struct{}
	schemas atomic.Int64
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
	s := &Server{dir: dir, exited: make(chan struct{})}
	var cred *syscall.Credential
	if os.Geteuid() == 0 {
		u, err := user.Lookup("postgres")
		if err != nil {
			_ = os.RemoveAll(dir)
			return nil, fmt.Errorf("running as root, PostgreSQL needs the user postgres (Debian's package creates it): %w", err)
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		cred = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
		if err := os.Chown(dir, uid, gid); err != nil {
			_ = os.RemoveAll(dir)
			return nil, err
		}
	}
	run := func(name string, args ...string) *exec.Cmd {
		c := exec.CommandContext(ctx, filepath.Join(bin, name), args...)
		c.SysProcAttr = &syscall.SysProcAttr{Credential: cred, Pdeathsig: syscall.SIGQUIT}
		c.Env = append(os.Environ(), "LC_ALL=C.UTF-8")
		return c
	}
	data := filepath.Join(dir, "data")
	if out, err := run("initdb", "-D", data, "-U", "outpost", "--auth=trust", "-E", "UTF8", "--locale=C.UTF-8", "--no-sync").CombinedOutput(); err != nil {
		_ = os.RemoveAll(dir)
		return nil, fmt.Errorf("initdb: %w: %s", err, out)
	}
	port, err := freePort(ctx)
	if err != nil {
		_ = os.RemoveAll(dir)
		return nil, err
	}
	log, err := os.Create(filepath.Join(dir, "postgres.log"))
	if err != nil {
		_ = os.RemoveAll(dir)
		return nil, err
	}
	args := []string{"-D", data, "-p", strconv.Itoa(port), "-k", dir,
		"-c", "listen_addresses=127.0.0.1", "-c", "max_connections=300", "-c", "shared_buffers=64MB"}
	if !durable {
		args = append(args, "-c", "fsync=off", "-c", "synchronous_commit=off", "-c", "full_page_writes=off")
	}
	s.cmd = run("postgres", args...)
	s.cmd.Stdout, s.cmd.Stderr = log, log
	// Stop with SIGINT (fast shutdown), not the context's SIGKILL.
	s.cmd.Cancel = func() error { return s.cmd.Process.Signal(syscall.SIGINT) }
	if err := s.cmd.Start(); err != nil {
		_ = os.RemoveAll(dir)
		return nil, fmt.Errorf("start postgres: %w", err)
	}
	go func() { _ = s.cmd.Wait(); _ = log.Close(); close(s.exited) }()
	s.URL = fmt.Sprintf("postgres://outpost@127.0.0.1:%d/postgres?sslmode=disable", port)
	if err := s.waitReady(ctx); err != nil {
		tail, _ := os.ReadFile(filepath.Join(dir, "postgres.log"))
		s.Stop()
		return nil, fmt.Errorf("%w; server log:\n%s", err, tail)
	}
	return s, nil
}

func freePort(ctx context.Context) (int, error) {
	l, err := (&net.ListenConfig{}).Listen(ctx, "tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	addr, ok := l.Addr().(*net.TCPAddr)
	if !ok {
		return 0, fmt.Errorf("unexpected listener address %v", l.Addr())
	}
	return addr.Port, nil
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

// Stop shuts the server down (fast shutdown, then kill after 20 s) and deletes its directory.
func (s *Server) Stop() {
	if s.cmd != nil && s.cmd.Process != nil {
		_ = s.cmd.Process.Signal(syscall.SIGINT)
		select {
		case <-s.exited:
		case <-time.After(20 * time.Second):
			_ = s.cmd.Process.Kill()
			<-s.exited
		}
	}
	_ = os.RemoveAll(s.dir)
}
