package sqlstore_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	neturl "net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/agentbox/agentbox/internal/errdefs"
	"github.com/agentbox/agentbox/internal/store"
	"github.com/agentbox/agentbox/internal/store/sqlstore"
	"github.com/agentbox/agentbox/internal/store/storetest"
	"github.com/agentbox/agentbox/internal/testutil/pgtest"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }

func openPostgres(t *testing.T) *sqlstore.Store {
	t.Helper()
	s, err := sqlstore.OpenPostgres(t.Context(), pgtest.NewDatabase(t))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestConformancePostgres(t *testing.T) {
	storetest.Run(t, func(t *testing.T) store.Store { return openPostgres(t) })
	t.Logf("PostgreSQL started in %s", pgtest.StartupTime())
}

// TestReopenPostgres checks that migrations are idempotent and data
// persists across connections.
func TestReopenPostgres(t *testing.T) {
	url := pgtest.NewDatabase(t)
	s, err := sqlstore.OpenPostgres(t.Context(), url)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.AppendEvent(t.Context(), store.Event{Actor: "t", Type: "x"}); err != nil {
		t.Fatal(err)
	}
	s.Close()
	s, err = sqlstore.OpenPostgres(t.Context(), url)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ev, err := s.ListEvents(t.Context(), store.EventFilter{})
	if err != nil || len(ev) != 1 {
		t.Fatalf("after reopen: %d events, %v", len(ev), err)
	}
}

// TestOpenPostgresRedacts checks that a failed connection names the
// database without its password.
func TestOpenPostgresRedacts(t *testing.T) {
	for _, u := range []string{
		"postgres://agent:hunter2secret@127.0.0.1:1/db?connect_timeout=2",
		"postgres://agent@127.0.0.1:1/db?password=hunter2secret&connect_timeout=2",
		"postgres://agent:hunter2secret@127.0.0.1:1/db?sslmode=bogus",
		"mysql://agent:hunter2secret@127.0.0.1/db",
	} {
		_, err := sqlstore.OpenPostgres(t.Context(), u)
		if err == nil {
			t.Fatalf("OpenPostgres(%s) succeeded", store.RedactURL(u))
		}
		if strings.Contains(err.Error(), "hunter2secret") {
			t.Errorf("error names the password: %v", err)
		}
		if !strings.Contains(err.Error(), "127.0.0.1") {
			t.Errorf("error does not name the database: %v", err)
		}
	}
	_, err := sqlstore.OpenPostgres(t.Context(), "mysql://127.0.0.1/db")
	if !errors.Is(err, errdefs.ErrInvalid) {
		t.Errorf("a mysql:// URL: %v, want invalid", err)
	}
}

// TestMigrationsPaired checks that every migration exists for both
// databases under the same version, so that neither schema falls behind.
func TestMigrationsPaired(t *testing.T) {
	names := func(dir string) []string {
		m, err := filepath.Glob(filepath.Join(dir, "*.sql"))
		if err != nil || len(m) == 0 {
			t.Fatalf("no migrations in %s: %v", dir, err)
		}
		for i := range m {
			m[i] = filepath.Base(m[i])
		}
		return m
	}
	lite, pg := names("migrations"), names("pgmigrations")
	if strings.Join(lite, " ") != strings.Join(pg, " ") {
		t.Fatalf("migrations differ:\nsqlite:   %v\npostgres: %v", lite, pg)
	}
}

// TestSchemasMatch checks that both databases end up with the same tables
// and columns (agentbox migrate copies column by column).
func TestSchemasMatch(t *testing.T) {
	lite, err := sqlstore.Open(t.Context(), filepath.Join(t.TempDir(), "agentbox.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer lite.Close()
	pg := openPostgres(t)
	defer pg.Close()
	ls, err := lite.Schema(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	ps, err := pg.Schema(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if len(ls) < 10 {
		t.Fatalf("SQLite schema has only %d tables: %v", len(ls), ls)
	}
	for table, cols := range ls {
		if strings.Join(cols, ",") != strings.Join(ps[table], ",") {
			t.Errorf("table %s: sqlite columns %v, postgres %v", table, cols, ps[table])
		}
	}
	for table := range ps {
		if _, ok := ls[table]; !ok {
			t.Errorf("table %s only on postgres", table)
		}
	}
}

// TestHoldExclusive checks that a second daemon on a database is refused,
// naming the first, and gets it once the first lets go; that a holder
// whose connection breaks takes the lock again; and that one that finds
// it taken by then is told it lost it.
func TestHoldExclusive(t *testing.T) {
	defer sqlstore.SetHoldCheck(50 * time.Millisecond)()
	ctx := t.Context()
	url := pgtest.NewDatabase(t)
	open := func() *sqlstore.Store {
		s, err := sqlstore.OpenPostgres(ctx, url)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	}
	a, b := open(), open()
	lostA := make(chan error, 1)
	release, err := a.HoldExclusive(ctx, func(err error) { lostA <- err })
	if err != nil {
		t.Fatal(err)
	}
	_, err = b.HoldExclusive(ctx, nil)
	if !errors.Is(err, errdefs.ErrConflict) || !strings.Contains(err.Error(), fmt.Sprintf("agentbox pid %d", os.Getpid())) {
		t.Fatalf("a second hold: %v, want a conflict naming pid %d", err, os.Getpid())
	}
	release()
	release() // twice is harmless
	releaseB, err := b.HoldExclusive(ctx, nil)
	if err != nil {
		t.Fatalf("after the first let go: %v", err)
	}
	releaseB()

	// The holder's connection breaks; nobody else wants the lock: the
	// holder takes it again on a new connection.
	db, err := sql.Open("pgx", url)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if release, err = a.HoldExclusive(ctx, func(err error) { lostA <- err }); err != nil {
		t.Fatal(err)
	}
	defer release()
	breakHolder := func() {
		t.Helper()
		var n int
		if err := db.QueryRowContext(ctx, `SELECT COUNT(pg_terminate_backend(l.pid, 5000)) FROM pg_locks l
			WHERE l.locktype = 'advisory' AND l.granted AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())`).Scan(&n); err != nil || n != 1 {
			t.Fatalf("ending the holder's connection: %d ended, %v", n, err)
		}
	}
	held := func() bool {
		var n int
		db.QueryRowContext(ctx, `SELECT COUNT(*) FROM pg_locks l WHERE l.locktype = 'advisory' AND l.granted
			AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())`).Scan(&n)
		return n == 1
	}
	breakHolder()
	for deadline := time.Now().Add(10 * time.Second); !held(); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the holder did not take the lock again after its connection broke")
		}
	}
	if _, err := b.HoldExclusive(ctx, nil); !errors.Is(err, errdefs.ErrConflict) {
		t.Fatalf("a second hold after the holder took it again: %v", err)
	}
	select {
	case err := <-lostA:
		t.Fatalf("the holder was told it lost the lock: %v", err)
	default:
	}

	// Broken again, and another daemon is quicker (the holder checks only
	// every second now): the holder is told.
	release()
	defer sqlstore.SetHoldCheck(time.Second)()
	if release, err = a.HoldExclusive(ctx, func(err error) { lostA <- err }); err != nil {
		t.Fatal(err)
	}
	defer release()
	breakHolder()
	releaseB, err = b.HoldExclusive(ctx, nil)
	if err != nil {
		t.Fatalf("taking the lock of a broken holder: %v", err)
	}
	defer releaseB()
	select {
	case err := <-lostA:
		if !errors.Is(err, errdefs.ErrConflict) {
			t.Errorf("lost: %v, want a conflict", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the holder was not told it lost the lock")
	}
}

// TestPostgresBadText checks that text PostgreSQL cannot hold is refused
// as invalid, naming the object, rather than as a server error.
func TestPostgresBadText(t *testing.T) {
	s := openPostgres(t)
	defer s.Close()
	for _, bad := range []string{"nul\x00byte", "bad\xffutf8"} {
		r := store.Repo{ID: "repo_1", URL: "https://example.invalid/" + bad, Path: "/d", CreatedAt: time.Now(), LastFetchAt: time.Now(), LastUsedAt: time.Now()}
		err := s.CreateRepo(t.Context(), r)
		if !errors.Is(err, errdefs.ErrInvalid) || !strings.Contains(err.Error(), "repo repo_1") {
			t.Errorf("a URL with %q: %v, want invalid", bad, err)
		}
	}
}

// TestHoldExclusiveAfterCrash checks that a daemon started right after
// one of this machine died waits for the server to end the dead one's
// session, while a live holder is refused at once.
func TestHoldExclusiveAfterCrash(t *testing.T) {
	ctx := t.Context()
	url := pgtest.NewDatabase(t)
	s, err := sqlstore.OpenPostgres(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	dead := exec.Command("true")
	if err := dead.Run(); err != nil {
		t.Fatal(err)
	}
	host, _ := os.Hostname()
	// holdAs takes the daemon lock the way a daemon with that pid would,
	// in a session of its own; end ends the session.
	holdAs := func(pid int) (end func()) {
		db, err := sql.Open("pgx", url+"&application_name="+strings.ReplaceAll(neturl.QueryEscape(fmt.Sprintf("agentbox pid %d on %s", pid, host)), "+", "%20"))
		if err != nil {
			t.Fatal(err)
		}
		db.SetMaxOpenConns(1)
		t.Cleanup(func() { db.Close() })
		if _, err := db.ExecContext(ctx, `SELECT pg_advisory_lock(`+strconv.FormatInt(sqlstore.DaemonLockKey, 10)+`)`); err != nil {
			t.Fatal(err)
		}
		return func() { db.Close() }
	}
	endLive := holdAs(os.Getppid())
	start := time.Now()
	if _, err := s.HoldExclusive(ctx, nil); !errors.Is(err, errdefs.ErrConflict) || time.Since(start) > 2*time.Second {
		t.Fatalf("a live holder: %v after %s, want a conflict at once", err, time.Since(start))
	}
	endLive()

	endDead := holdAs(dead.Process.Pid)
	go func() {
		time.Sleep(300 * time.Millisecond) // the server noticing the death, late
		endDead()
	}()
	release, err := s.HoldExclusive(ctx, nil)
	if err != nil {
		t.Fatalf("after a dead daemon's session ended: %v", err)
	}
	release()
}

// TestPreparedWithOneConnection ends an exec, a transaction that runs
// prepared statements, on a store whose pool has a single connection: a
// statement first prepared from inside the transaction would wait for a
// second connection forever.
func TestPreparedWithOneConnection(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	s, err := sqlstore.OpenPostgres(ctx, pgtest.NewDatabase(t))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	sqlstore.SetMaxConns(s, 1)
	n := time.Now().UTC()
	if err := s.CreateRepo(ctx, store.Repo{ID: "repo_a", URL: "https://example.invalid/a.git", Path: "/r", DefaultBranch: "main", CreatedAt: n}); err != nil {
		t.Fatal(err)
	}
	if err := s.CreateWorkspace(ctx, store.Workspace{ID: "ws_1", RepoID: "repo_a", Ref: "main", Driver: "overlay", Dir: "/w", State: store.WorkspaceReady, CreatedAt: n, UpdatedAt: n}); err != nil {
		t.Fatal(err)
	}
	if err := s.CreateSandbox(ctx, store.Sandbox{ID: "sb_1", WorkspaceID: "ws_1", Backend: "docker", State: "running", Spec: "{}", CreatedAt: n, UpdatedAt: n}); err != nil {
		t.Fatal(err)
	}
	e := store.Exec{ID: "ex_1", SandboxID: "sb_1", WorkspaceID: "ws_1", Argv: `["true"]`, State: store.ExecRunning, StartedAt: n}
	if err := s.CreateExec(ctx, e); err != nil {
		t.Fatal(err)
	}
	e.State, e.FinishedAt = store.ExecExited, n.Add(time.Second)
	if _, err := s.FinishExecEvent(ctx, e, store.Event{Actor: "t", Type: "exec.finished", SandboxID: "sb_1"}); err != nil {
		t.Fatalf("ending an exec with one connection: %v", err)
	}
	if got, err := s.GetExec(ctx, "ex_1"); err != nil || got.State != store.ExecExited {
		t.Fatalf("the exec after its end: %+v, %v", got, err)
	}
}
