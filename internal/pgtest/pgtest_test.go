package pgtest

import (
	"errors"
	"os"
	"testing"

	"github.com/jackc/pgx/v5"
)

// TestRestartAndCrashKeepDataAndPort: after a fast shutdown and after every server process was
// killed, the server answers on the same URL with every committed row (a durable server: a
// crash loses nothing committed).
func TestRestartAndCrashKeepDataAndPort(t *testing.T) {
	s, err := StartDurable(t.Context())
	if err != nil {
		if os.Getenv("CI") != "true" && errors.Is(err, ErrMissing) {
			t.Skip(err)
		}
		t.Fatal(err)
	}
	t.Cleanup(s.Stop)
	ctx := t.Context()
	run := func(sql string, args ...any) {
		t.Helper()
		conn, err := pgx.Connect(ctx, s.URL)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close(ctx)
		if _, err := conn.Exec(ctx, sql, args...); err != nil {
			t.Fatal(err)
		}
	}
	count := func() int {
		t.Helper()
		conn, err := pgx.Connect(ctx, s.URL)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close(ctx)
		var n int
		if err := conn.QueryRow(ctx, "SELECT count(*) FROM rows").Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	run("CREATE TABLE rows (n int)")
	run("INSERT INTO rows VALUES (1)")
	// A session open across the restart is ended by it, as a client's pooled connection is.
	held, err := pgx.Connect(ctx, s.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close(ctx)
	down, err := s.Restart(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("fast shutdown and start: %s without connections", down)
	if err := held.Ping(ctx); err == nil {
		t.Error("a session opened before the restart still works after it")
	}
	run("INSERT INTO rows VALUES (2)")
	down, err = s.Crash(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("SIGKILL and recovery: %s without connections", down)
	if n := count(); n != 2 {
		t.Errorf("%d rows after the restart and the crash, want 2", n)
	}
}
