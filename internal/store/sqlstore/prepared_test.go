package sqlstore_test

import (
	"errors"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/agentbox/agentbox/internal/errdefs"
	"github.com/agentbox/agentbox/internal/store"
	"github.com/agentbox/agentbox/internal/store/sqlstore"
)

// BenchmarkExecRecord is the store's share of one exec: the reads that
// find the workspace's running sandbox, the exec's row before it runs,
// and its end with its event in one transaction after.
func BenchmarkExecRecord(b *testing.B) {
	ctx := b.Context()
	s, n := storeWithRepo(b)
	if err := s.CreateWorkspace(ctx, store.Workspace{ID: "ws_1", RepoID: "repo_a", Ref: "main", Driver: "overlay", Dir: "/w", State: store.WorkspaceReady, CreatedAt: n, UpdatedAt: n}); err != nil {
		b.Fatal(err)
	}
	if err := s.CreateSandbox(ctx, store.Sandbox{ID: "sb_1", WorkspaceID: "ws_1", Backend: "docker", State: "running", Spec: "{}", CreatedAt: n, UpdatedAt: n}); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for i := range b.N {
		if _, err := s.GetWorkspace(ctx, "ws_1"); err != nil {
			b.Fatal(err)
		}
		if _, err := s.ListSandboxes(ctx, store.SandboxFilter{WorkspaceID: "ws_1"}); err != nil {
			b.Fatal(err)
		}
		e := store.Exec{ID: fmt.Sprintf("ex_%d", i), SandboxID: "sb_1", WorkspaceID: "ws_1", Argv: `["true"]`, State: store.ExecRunning, StartedAt: time.Now().UTC()}
		if err := s.CreateExec(ctx, e); err != nil {
			b.Fatal(err)
		}
		e.State, e.FinishedAt = store.ExecExited, time.Now().UTC()
		if _, err := s.FinishExecEvent(ctx, e, store.Event{Actor: "api", Type: "exec.finished", WorkspaceID: "ws_1", SandboxID: "sb_1", Detail: `{"exit_code":0}`}); err != nil {
			b.Fatal(err)
		}
	}
}

// TestPreparedBounded runs the prepared queries of an exec for many
// objects and checks that the statements kept are one per query text,
// not one per object (a value in the text would grow the set forever),
// and that they still see the rows written in between.
func TestPreparedBounded(t *testing.T) {
	ctx := t.Context()
	s, n := storeWithRepo(t)
	var kept int
	for i := range 20 {
		ws, sb := fmt.Sprintf("ws_%d", i), fmt.Sprintf("sb_%d", i)
		if err := s.CreateWorkspace(ctx, store.Workspace{ID: ws, RepoID: "repo_a", Ref: "main", Driver: "overlay", Dir: "/w" + ws, State: store.WorkspaceReady, CreatedAt: n, UpdatedAt: n}); err != nil {
			t.Fatal(err)
		}
		if err := s.CreateSandbox(ctx, store.Sandbox{ID: sb, WorkspaceID: ws, Backend: "docker", State: "running", Spec: "{}", CreatedAt: n, UpdatedAt: n}); err != nil {
			t.Fatal(err)
		}
		if w, err := s.GetWorkspace(ctx, ws); err != nil || w.ID != ws {
			t.Fatalf("GetWorkspace %s: %+v, %v", ws, w, err)
		}
		if got, err := s.GetSandbox(ctx, sb); err != nil || got.WorkspaceID != ws {
			t.Fatalf("GetSandbox %s: %+v, %v", sb, got, err)
		}
		if l, err := s.ListSandboxes(ctx, store.SandboxFilter{WorkspaceID: ws}); err != nil || len(l) != 1 || l[0].ID != sb {
			t.Fatalf("ListSandboxes %s: %+v, %v", ws, l, err)
		}
		e := store.Exec{ID: "ex_" + sb, SandboxID: sb, WorkspaceID: ws, Argv: `["true"]`, State: store.ExecRunning, StartedAt: n}
		if err := s.CreateExec(ctx, e); err != nil {
			t.Fatal(err)
		}
		e.State, e.FinishedAt = store.ExecExited, n.Add(time.Second)
		if _, err := s.FinishExecEvent(ctx, e, store.Event{Actor: "t", Type: "exec.finished", SandboxID: sb}); err != nil {
			t.Fatal(err)
		}
		if i == 0 {
			kept = sqlstore.Prepared(s)
		}
	}
	if got := sqlstore.Prepared(s); got != kept || kept == 0 {
		t.Errorf("%d statements prepared after 20 objects, %d after the first", got, kept)
	}
	if _, err := s.GetWorkspace(ctx, "ws_missing"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("GetWorkspace of a missing workspace through a prepared statement: %v, want not found", err)
	}
}

// storeWithRepo opens a new SQLite store, closed when the test ends, with
// one repo (repo_a) made at the time it returns.
func storeWithRepo(tb testing.TB) (*sqlstore.Store, time.Time) {
	s, err := sqlstore.Open(tb.Context(), filepath.Join(tb.TempDir(), "agentbox.db"))
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { s.Close() })
	n := time.Now().UTC()
	if err := s.CreateRepo(tb.Context(), store.Repo{ID: "repo_a", URL: "https://example.invalid/a.git", Path: "/r", DefaultBranch: "main", CreatedAt: n}); err != nil {
		tb.Fatal(err)
	}
	return s, n
}
