package main

import (
	"bytes"
	"context"
	"database/sql"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/agentbox/agentbox/client"
	"github.com/agentbox/agentbox/internal/bench"
	"github.com/agentbox/agentbox/internal/secrets"
	"github.com/agentbox/agentbox/internal/store/sqlstore"
	"github.com/agentbox/agentbox/internal/testutil"
	"github.com/agentbox/agentbox/internal/testutil/pgtest"
)

// withPassword puts a password into a pgtest URL (the test server trusts
// local connections and ignores it), so that tests can look for it where
// it must never appear.
func withPassword(u, pw string) string {
	return strings.Replace(u, "postgres://postgres@", "postgres://postgres:"+pw+"@", 1)
}

// TestPostgresStore runs a real daemon on PostgreSQL (serve --store): a
// workspace and an exec on the docker backend survive a restart, the data
// dir holds no SQLite file, a second daemon on the same database is
// refused, and the password appears in no log.
func TestPostgresStore(t *testing.T) {
	const pw = "s3cret-pg-pw"
	url := withPassword(pgtest.NewDatabase(t), pw)
	data := t.TempDir()
	src := testutil.NewRepo(t, map[string]string{"hello.txt": "hello from the repo\n"})
	d := startDaemon(t, data, "--store", url)
	cleanupAll(t, data, "--store", url)
	cl := d.client(t)
	ws, err := cl.CreateWorkspace(t.Context(), client.CreateWorkspace{Repo: src.Dir})
	if err != nil {
		t.Fatal(err)
	}
	sb, err := cl.CreateSandbox(t.Context(), client.CreateSandbox{Workspace: ws.ID, Backend: "docker", Image: "agentbox/busybox:latest"})
	if err != nil {
		t.Fatal(err)
	}
	out, errOut, code := runCLI(t, data, "", "exec", ws.ID, "--", "sh", "-c", "cat hello.txt; echo made > made.txt")
	if code != 0 || out != "hello from the repo\n" {
		t.Fatalf("exec: exit %d %q %q", code, out, errOut)
	}
	// A second daemon, on its own data dir, on the same database, is a
	// second node: it serves the first one's workspace by forwarding.
	other := t.TempDir()
	d2 := startDaemon(t, other, "--store", url)
	var via bytes.Buffer
	if _, err := d2.client(t).ReadFile(t.Context(), ws.ID, "made.txt", &via); err != nil || via.String() != "made\n" {
		t.Errorf("made.txt through the second node: %q, %v", via.String(), err)
	}
	second := oneNode(t, other, d2)
	d2.stop(t)
	if strings.Contains(d2.logs.String(), pw) {
		t.Errorf("the second daemon logged the password")
	}
	first := oneNode(t, data, d)
	if first == second {
		t.Errorf("both daemons are node %s", first)
	}
	d.stop(t)
	if _, err := os.Stat(filepath.Join(data, "agentbox.db")); !os.IsNotExist(err) {
		t.Errorf("the data dir has a SQLite database beside --store: %v", err)
	}
	logs := d.logs.String()

	d = startDaemon(t, data, "--store", url)
	defer func() { d.stop(t) }() // the daemon running at the end
	cl = d.client(t)
	if got, err := cl.GetWorkspace(t.Context(), ws.ID); err != nil || got.ID != ws.ID {
		t.Fatalf("after the restart: workspace %v, %v", got.ID, err)
	}
	if again := oneNode(t, data, d); again != first {
		t.Errorf("the restarted daemon is node %s, was %s", again, first)
	}
	sbs, err := cl.ListSandboxes(t.Context(), ws.ID)
	if err != nil || len(sbs) != 1 || sbs[0].ID != sb.ID {
		t.Fatalf("after the restart: sandboxes %v, %v", sbs, err)
	}
	evs, err := cl.Events(t.Context(), client.EventFilter{Workspace: ws.ID})
	if err != nil {
		t.Fatal(err)
	}
	var execs int
	for _, e := range evs {
		if strings.HasPrefix(e.Type, "exec.") {
			execs++
		}
	}
	if execs == 0 {
		t.Errorf("after the restart: no exec event among %d events", len(evs))
	}
	var got bytes.Buffer
	if _, err := cl.ReadFile(t.Context(), ws.ID, "made.txt", &got); err != nil || got.String() != "made\n" {
		t.Errorf("after the restart: made.txt %q, %v", got.String(), err)
	}
	out, errOut, code = runCLI(t, data, "", "exec", ws.ID, "--", "cat", "made.txt")
	if code != 0 || out != "made\n" {
		t.Errorf("exec after the restart: exit %d %q %q", code, out, errOut)
	}
	// A crash: the database ends the dead daemon's session and its lock
	// with it, so the next start is not refused; the sandbox the crash
	// left running is reconciled and the next exec works.
	d.kill9(t)
	logs += d.logs.String()
	d = startDaemon(t, data, "--store", url)
	cl = d.client(t)
	if again := oneNode(t, data, d); again != first {
		t.Errorf("the daemon restarted after kill -9 is node %s, was %s", again, first)
	}
	out, errOut, code = runCLI(t, data, "", "exec", ws.ID, "--", "cat", "made.txt")
	if code != 0 || out != "made\n" {
		t.Errorf("exec after kill -9: exit %d %q %q", code, out, errOut)
	}
	if logs += d.logs.String(); strings.Contains(logs, pw) {
		t.Errorf("the daemon logged the password")
	}
	if !strings.Contains(logs, `"store":"postgres://postgres:xxxxx@`) {
		t.Errorf("the daemon does not log its store (redacted):\n%s", tail(logs, 3000))
	}
}

// TestMigrateToPostgres makes state with a real daemon on SQLite, copies
// it with agentbox migrate (refused while the daemon runs, and into a
// non-empty database), compares every row of every table, and serves it
// from PostgreSQL.
func TestMigrateToPostgres(t *testing.T) {
	url := pgtest.NewDatabase(t)
	data := t.TempDir()
	src := testutil.NewRepo(t, map[string]string{"hello.txt": "hello\n"})
	d := startDaemon(t, data)
	migrated := false
	t.Cleanup(func() {
		// Whichever store holds the workspaces now removes them.
		if migrated {
			cleanupAllNow(t, data, "--store", url)
		} else {
			cleanupAllNow(t, data)
		}
	})
	cl := d.client(t)
	ws, err := cl.CreateWorkspace(t.Context(), client.CreateWorkspace{Repo: src.Dir})
	if err != nil {
		t.Fatal(err)
	}
	if out, errOut, code := runCLI(t, data, "", "exec", ws.ID, "--", "sh", "-c", "echo changed >> hello.txt"); code != 0 {
		t.Fatalf("exec: %d %s %s", code, out, errOut)
	}
	if out, errOut, code := runCLI(t, data, "value-1\n", "secret", "set", "API_KEY"); code != 0 {
		t.Fatalf("secret set: %d %s %s", code, out, errOut)
	}
	out, errOut, code := runCLI(t, data, "", "migrate", "--data", data, "--to", url)
	if code == 0 || !strings.Contains(out+errOut, "held by another agentbox daemon") {
		t.Errorf("migrate beside a running daemon: exit %d %s%s", code, out, errOut)
	}
	d.stop(t)

	out, errOut, code = runCLI(t, data, "", "--json", "migrate", "--data", data, "--to", url)
	if code != 0 {
		t.Fatalf("migrate: exit %d %s %s", code, out, errOut)
	}
	migrated = true
	rep := oneJSON(t, out)
	t.Logf("migrate: %v", rep)
	lite, err := sqlstore.Open(t.Context(), filepath.Join(data, "agentbox.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer lite.Close()
	pg, err := sqlstore.OpenPostgres(t.Context(), url)
	if err != nil {
		t.Fatal(err)
	}
	defer pg.Close()
	want, err := lite.Dump(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	got, err := pg.Dump(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	for _, table := range []string{"repos", "workspaces", "sandboxes", "execs", "events", "secrets"} {
		if len(want[table]) == 0 {
			t.Errorf("the daemon left table %s empty: the test proves nothing of it", table)
		}
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("PostgreSQL after migrate differs from SQLite (-sqlite +postgres):\n%s", diff)
	}
	out, errOut, code = runCLI(t, data, "", "migrate", "--data", data, "--to", url)
	if code == 0 || !strings.Contains(out+errOut, "not empty") {
		t.Errorf("a second migrate into the same database: exit %d %s%s", code, out, errOut)
	}

	d = startDaemon(t, data, "--store", url)
	defer d.stop(t)
	cl = d.client(t)
	var content bytes.Buffer
	if _, err := cl.ReadFile(t.Context(), ws.ID, "hello.txt", &content); err != nil || content.String() != "hello\nchanged\n" {
		t.Errorf("the workspace on PostgreSQL: %q, %v", content.String(), err)
	}
	// The secret moved sealed; the data dir's key still unseals it.
	box, err := secrets.Open(data, pg)
	if err != nil {
		t.Fatal(err)
	}
	if v, err := box.Reveal(t.Context(), "API_KEY"); err != nil || string(v) != "value-1" {
		t.Errorf("the migrated secret: %q, %v", v, err)
	}
	if out, errOut, code := runCLI(t, data, "", "exec", ws.ID, "--", "true"); code != 0 {
		t.Errorf("exec on PostgreSQL: exit %d %s %s", code, out, errOut)
	}
	evs, err := cl.Events(t.Context(), client.EventFilter{})
	if err != nil || len(evs) <= len(want["events"]) {
		t.Errorf("events on PostgreSQL: %d (migrated %d), %v", len(evs), len(want["events"]), err)
	}
}

// oneNode checks that agentbox nodes lists d, up, on data, and returns its
// node ID.
func oneNode(t *testing.T, data string, d *daemonProc) string {
	t.Helper()
	out, errOut, code := runCLI(t, data, "", "--json", "nodes")
	if code != 0 {
		t.Fatalf("nodes: exit %d %s %s", code, out, errOut)
	}
	ns, _ := oneJSON(t, out)["nodes"].([]any)
	var n map[string]any
	for _, x := range ns {
		if x.(map[string]any)["data_dir"] == data {
			n = x.(map[string]any)
		}
	}
	if n == nil {
		t.Fatalf("nodes: none on %s: %s", data, out)
	}
	if n["state"] != "up" || n["pid"] != float64(d.cmd.Process.Pid) || n["data_dir"] != data || !strings.HasPrefix(n["id"].(string), "node_") {
		t.Errorf("nodes: %v, want daemon pid %d on %s up", n, d.cmd.Process.Pid, data)
	}
	return n["id"].(string)
}

// cleanupAllNow is cleanupAll's work, run at once (from a cleanup).
func cleanupAllNow(t *testing.T, data string, extra ...string) {
	ctx := context.Background()
	d := startDaemon(t, data, extra...)
	cl := d.client(t)
	wss, _ := cl.ListWorkspaces(ctx, "", "")
	for _, w := range wss {
		if err := cl.RemoveWorkspace(ctx, w.ID); err != nil {
			t.Errorf("cleanup %s: %v", w.ID, err)
		}
	}
	d.stop(t)
	if n := mountsUnder(t, data); n != 0 {
		t.Errorf("%d mounts left under %s", n, data)
	}
}

// TestLoadPostgres is TestLoad against a daemon on PostgreSQL: 32 clients
// doing mixed operations, then every check of the benchmark (no error,
// memory flat, nothing left).
func TestLoadPostgres(t *testing.T) {
	requireDocker(t)
	var log bytes.Buffer
	res, err := bench.Load(t.Context(), bench.LoadOptions{
		DaemonOptions: bench.DaemonOptions{Binary: binary, Store: pgtest.NewDatabase(t)},
		Clients:       32,
		Duration:      20 * time.Second,
	}, &log)
	if err != nil {
		t.Fatalf("%v\n%s", err, log.String())
	}
	var out bytes.Buffer
	res.Print(&out)
	t.Logf("\n%s", out.String())
	if !res.OK() {
		t.Errorf("load checks failed\n%s", log.String())
	}
	for _, op := range res.Ops {
		if op.Count == 0 {
			t.Errorf("operation %s never completed", op.Op)
		}
	}
}

// TestPostgresLockLost breaks a daemon's connection that holds its store
// lock (shared with the other nodes) and takes the lock exclusively
// first, as a migration would: the daemon stops, saying why, rather than
// write into a store being migrated.
func TestPostgresLockLost(t *testing.T) {
	url := pgtest.NewDatabase(t)
	data := t.TempDir()
	d := startDaemon(t, data, "--store", url)
	db, err := sql.Open("pgx", url)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	conn, err := db.Conn(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	var pid int
	var key int64
	if err := conn.QueryRowContext(t.Context(), `SELECT pid, (classid::bigint << 32) | objid::bigint FROM pg_locks
		WHERE locktype = 'advisory' AND granted AND objsubid = 1 AND database = (SELECT oid FROM pg_database WHERE datname = current_database())`).Scan(&pid, &key); err != nil {
		t.Fatalf("finding the daemon's lock: %v", err)
	}
	var took bool
	if err := conn.QueryRowContext(t.Context(), `SELECT pg_terminate_backend($1, 5000)`, pid).Scan(&took); err != nil || !took {
		t.Fatalf("ending the daemon's lock connection: %v", err)
	}
	if err := conn.QueryRowContext(t.Context(), `SELECT pg_try_advisory_lock($1)`, key).Scan(&took); err != nil || !took {
		t.Fatalf("taking the daemon's lock: %v %v", took, err)
	}
	exited := make(chan error, 1)
	go func() { exited <- d.cmd.Wait() }()
	select {
	case err := <-exited:
		if err == nil || !strings.Contains(d.logs.String(), "lost the lock on the database") {
			t.Errorf("the daemon exited with %v:\n%s", err, tail(d.logs.String(), 2000))
		}
	case <-time.After(30 * time.Second):
		d.cmd.Process.Kill()
		t.Fatalf("the daemon kept serving without its store lock:\n%s", tail(d.logs.String(), 2000))
	}
	conn.ExecContext(t.Context(), `SELECT pg_advisory_unlock($1)`, key)
	// Once the lock is free again, a daemon starts on the store.
	startDaemon(t, data, "--store", url).stop(t)
}
