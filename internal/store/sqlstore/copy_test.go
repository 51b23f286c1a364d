package sqlstore_test

import (
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/agentbox/agentbox/internal/apitypes"
	"github.com/agentbox/agentbox/internal/errdefs"
	"github.com/agentbox/agentbox/internal/store"
	"github.com/agentbox/agentbox/internal/store/sqlstore"
)

// fill puts at least one row into every table through the Store methods.
func fill(t *testing.T, s store.Store) {
	t.Helper()
	ctx := t.Context()
	n := time.Now().UTC().Truncate(time.Microsecond)
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(s.CreateRepo(ctx, store.Repo{ID: "repo_1", URL: "https://example.invalid/r.git", Path: "/d/r", DefaultBranch: "main", CreatedAt: n, LastFetchAt: n, LastUsedAt: n}))
	must(s.CreatePristine(ctx, store.Pristine{ID: "pc_1", RepoID: "repo_1", Commit: "c0ffee", Path: "/d/p", SizeBytes: 7, CreatedAt: n, LastUsedAt: n}))
	must(s.CreateWorkspace(ctx, store.Workspace{ID: "ws_1", RepoID: "repo_1", PristineID: "pc_1", Ref: "main", BaseCommit: "c0ffee",
		Branch: "agentbox/ws_1", Task: "t", Driver: "overlay", Dir: "/d/w", State: store.WorkspaceReady, Dirty: true, CreatedAt: n, UpdatedAt: n}))
	must(s.CreateWorkspace(ctx, store.Workspace{ID: "ws_2", RepoID: "repo_1", ParentID: "ws_1", Ref: "main", BaseCommit: "c0ffee",
		Branch: "agentbox/ws_2", Driver: "copy", Dir: "/d/w2", State: store.WorkspaceReady, CreatedAt: n, UpdatedAt: n}))
	must(s.SetWorkspaceSandboxSpec(ctx, "ws_1", `{"image":"x"}`))
	must(s.CreateSandbox(ctx, store.Sandbox{ID: "sb_1", WorkspaceID: "ws_1", Backend: "docker", BackendRef: "abc", Image: "img", Spec: "{}",
		State: "running", TokenHash: "ff", CreatedAt: n, UpdatedAt: n, LastActivityAt: n}))
	must(s.CreateExec(ctx, store.Exec{ID: "ex_1", SandboxID: "sb_1", WorkspaceID: "ws_1", Argv: `["true"]`, State: store.ExecRunning, Task: "t", StartedAt: n}))
	_, err := s.FinishExecEvent(ctx, store.Exec{ID: "ex_1", State: store.ExecExited, ExitCode: 3, TimedOut: true, OOM: true, CPUNanos: 5, FinishedAt: n.Add(time.Second)},
		store.Event{Actor: "t", Type: "exec.finished", SandboxID: "sb_1"})
	must(err)
	_, err = s.RecordEgress(ctx, store.EgressUsage{SandboxID: "sb_1", WorkspaceID: "ws_1", Task: "t", BytesUp: 10, BytesDown: 20}, store.Event{Actor: "t", Type: "egress"})
	must(err)
	must(s.SetSandboxCgroupUsage(ctx, "sb_1", 99, 1024))
	must(s.PutSecret(ctx, store.SealedSecret{Name: "K", Nonce: []byte{0, 1, 2, 255}, Sealed: []byte("\x00sealed\xff"), CreatedAt: n, UpdatedAt: n}))
	must(s.CreateCandidate(ctx, store.Candidate{ID: "cand_1", WorkspaceID: "ws_1", Disposition: "ready", CreatedAt: n, UpdatedAt: n}))
	must(s.RegisterNode(ctx, store.Node{ID: "node_1", Host: "h", PID: 1, DataDir: "/d", StartedAt: n, HeartbeatAt: n}))
	must(s.StopNode(ctx, "node_1", n.Add(time.Minute)))
	_, err = s.ClusterValue(ctx, "forward_key", "0123abcd")
	must(err)
	must(s.CreateSolveRun(ctx, store.SolveRun{ID: "run_1", State: "running", Attempts: []apitypes.SolveAttempt{}, CreatedAt: n, UpdatedAt: n}))
	must(s.AppendSolveStep(ctx, store.SolveStep{RunID: "run_1", Attempt: 1, Seq: 1, Role: "agent", Kind: "message", Doc: []byte(`{"text":"hi"}`), CreatedAt: n}))
	must(s.PutForge(ctx, store.ForgeBinding{Host: "git.example", Kind: "gitea", Secret: "K", CreatedAt: n, UpdatedAt: n}))
}

// TestCopyTo copies a SQLite store with rows in every table into
// PostgreSQL and compares every row; the copy goes on where the original
// left off (event IDs), and a second copy into the same database is
// refused without a change.
func TestCopyTo(t *testing.T) {
	ctx := t.Context()
	lite, err := sqlstore.Open(ctx, filepath.Join(t.TempDir(), "agentbox.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer lite.Close()
	fill(t, lite)
	pg := openPostgres(t)
	defer pg.Close()
	stats, err := lite.CopyTo(ctx, pg)
	if err != nil {
		t.Fatal(err)
	}
	want, err := lite.Dump(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for table, rows := range want {
		if len(rows) == 0 {
			t.Errorf("table %s is empty: fill does not cover it", table)
		}
		if stats[table] != int64(len(rows)) {
			t.Errorf("table %s: copied %d rows of %d", table, stats[table], len(rows))
		}
	}
	got, err := pg.Dump(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("after the copy (-sqlite +postgres):\n%s", diff)
	}
	// The stores agree through the interface too.
	for _, s := range []store.Store{lite, pg} {
		if _, err := s.AppendEvent(ctx, store.Event{Actor: "t", Type: "after"}); err != nil {
			t.Fatal(err)
		}
	}
	le, _ := lite.ListEvents(ctx, store.EventFilter{})
	pe, _ := pg.ListEvents(ctx, store.EventFilter{})
	if diff := cmp.Diff(le, pe, cmp.Comparer(func(a, b time.Time) bool { return true })); diff != "" {
		t.Errorf("events after the copy (-sqlite +postgres):\n%s", diff)
	}
	before, _ := pg.Dump(ctx)
	if _, err := lite.CopyTo(ctx, pg); !errors.Is(err, errdefs.ErrConflict) {
		t.Fatalf("a copy into a non-empty database: %v, want a conflict", err)
	}
	after, _ := pg.Dump(ctx)
	if diff := cmp.Diff(before, after); diff != "" {
		t.Errorf("the refused copy changed the target:\n%s", diff)
	}
}
