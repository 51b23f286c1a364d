// Package storetest is the conformance suite every store.Store implementation
// runs. A new database backend is done when Run passes against it.
package storetest

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/agentbox/agentbox/internal/errdefs"
	"github.com/agentbox/agentbox/internal/store"
)

// Run runs the suite; newStore returns an empty store, closed by the suite.
func Run(t *testing.T, newStore func(t *testing.T) store.Store) {
	t.Run("Repos", func(t *testing.T) { testRepos(t, open(t, newStore)) })
	t.Run("Pristines", func(t *testing.T) { testPristines(t, open(t, newStore)) })
	t.Run("Workspaces", func(t *testing.T) { testWorkspaces(t, open(t, newStore)) })
	t.Run("Events", func(t *testing.T) { testEvents(t, open(t, newStore)) })
	t.Run("Sandboxes", func(t *testing.T) { testSandboxes(t, open(t, newStore)) })
	t.Run("Execs", func(t *testing.T) { testExecs(t, open(t, newStore)) })
	t.Run("ExecActivity", func(t *testing.T) { testExecActivity(t, open(t, newStore)) })
	t.Run("Secrets", func(t *testing.T) { testSecrets(t, open(t, newStore)) })
	t.Run("Usage", func(t *testing.T) { testUsage(t, open(t, newStore)) })
	t.Run("Candidates", func(t *testing.T) { testCandidates(t, open(t, newStore)) })
	t.Run("Forges", func(t *testing.T) { testForges(t, open(t, newStore)) })
	t.Run("Nodes", func(t *testing.T) { testNodes(t, open(t, newStore)) })
	t.Run("Ownership", func(t *testing.T) { testOwnership(t, open(t, newStore)) })
	t.Run("Solve", func(t *testing.T) { testSolve(t, open(t, newStore)) })
	t.Run("ConcurrentWriters", func(t *testing.T) { testConcurrent(t, open(t, newStore)) })
	t.Run("EventFollow", func(t *testing.T) { testEventFollow(t, open(t, newStore)) })
	t.Run("CandidateRace", func(t *testing.T) { testCandidateRace(t, open(t, newStore)) })
	t.Run("DeleteRepoRace", func(t *testing.T) { testDeleteRepoRace(t, open(t, newStore)) })
}

func open(t *testing.T, newStore func(t *testing.T) store.Store) store.Store {
	s := newStore(t)
	t.Cleanup(func() { s.Close() })
	return s
}

// now is truncated to microseconds so that every backend can represent it.
func now() time.Time { return time.Now().UTC().Truncate(time.Microsecond) }

func repo(id string) store.Repo {
	n := now()
	return store.Repo{ID: id, URL: "https://example.invalid/" + id + ".git", Path: "/data/repos/" + id,
		DefaultBranch: "main", SizeBytes: 42, CreatedAt: n, LastFetchAt: n, LastUsedAt: n}
}

func ws(id, repoID, pristineID string) store.Workspace {
	n := now()
	return store.Workspace{ID: id, RepoID: repoID, PristineID: pristineID, Ref: "main", BaseCommit: "abc",
		Branch: "agentbox/" + id, Task: "t1", Driver: "overlay", Dir: "/data/workspaces/" + id,
		State: store.WorkspaceReady, CreatedAt: n, UpdatedAt: n}
}

func wantClass(t *testing.T, err, class error) {
	t.Helper()
	if !errors.Is(err, class) {
		t.Fatalf("error = %v, want class %v", err, class)
	}
}

func testRepos(t *testing.T, s store.Store) {
	ctx := t.Context()
	r := repo("repo_a")
	if err := s.CreateRepo(ctx, r); err != nil {
		t.Fatal(err)
	}
	got, err := s.GetRepo(ctx, r.ID)
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff(r, got); d != "" {
		t.Errorf("GetRepo (-want +got):\n%s", d)
	}
	got, err = s.GetRepoByURL(ctx, r.URL)
	if err != nil || got.ID != r.ID {
		t.Fatalf("GetRepoByURL = %v, %v", got.ID, err)
	}

	dup := repo("repo_b")
	dup.URL = r.URL
	wantClass(t, s.CreateRepo(ctx, dup), errdefs.ErrConflict)
	wantClass(t, s.CreateRepo(ctx, r), errdefs.ErrConflict)

	_, err = s.GetRepo(ctx, "repo_missing")
	wantClass(t, err, errdefs.ErrNotFound)
	_, err = s.GetRepoByURL(ctx, "https://nowhere.invalid/x")
	wantClass(t, err, errdefs.ErrNotFound)

	r.SizeBytes = 1000
	r.DefaultBranch = "trunk"
	r.LastFetchAt = now().Add(time.Hour)
	if err := s.UpdateRepo(ctx, r); err != nil {
		t.Fatal(err)
	}
	got, _ = s.GetRepo(ctx, r.ID)
	if d := cmp.Diff(r, got); d != "" {
		t.Errorf("after UpdateRepo (-want +got):\n%s", d)
	}
	wantClass(t, s.UpdateRepo(ctx, repo("repo_missing")), errdefs.ErrNotFound)

	if err := s.CreateRepo(ctx, repo("repo_c")); err != nil {
		t.Fatal(err)
	}
	list, err := s.ListRepos(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff([]string{"repo_a", "repo_c"}, ids(list, func(r store.Repo) string { return r.ID })); d != "" {
		t.Errorf("ListRepos ids (-want +got):\n%s", d)
	}

	// A repo in use by a workspace cannot be deleted; once free it can.
	if err := s.CreateWorkspace(ctx, ws("ws_1", "repo_c", "")); err != nil {
		t.Fatal(err)
	}
	wantClass(t, s.DeleteRepo(ctx, "repo_c"), errdefs.ErrConflict)
	if _, err := s.GetRepo(ctx, "repo_c"); err != nil {
		t.Fatalf("refused delete changed the repo: %v", err)
	}
	if err := s.DeleteWorkspace(ctx, "ws_1"); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteRepo(ctx, "repo_c"); err != nil {
		t.Fatal(err)
	}
	wantClass(t, s.DeleteRepo(ctx, "repo_c"), errdefs.ErrNotFound)
}

func testPristines(t *testing.T, s store.Store) {
	ctx := t.Context()
	if err := s.CreateRepo(ctx, repo("repo_a")); err != nil {
		t.Fatal(err)
	}
	n := now()
	p := store.Pristine{ID: "pc_1", RepoID: "repo_a", Commit: "c0ffee", Path: "/data/pristine/x", SizeBytes: 7, CreatedAt: n, LastUsedAt: n}
	if err := s.CreatePristine(ctx, p); err != nil {
		t.Fatal(err)
	}
	dup := p
	dup.ID = "pc_2"
	wantClass(t, s.CreatePristine(ctx, dup), errdefs.ErrConflict)

	got, err := s.FindPristine(ctx, "repo_a", "c0ffee")
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff(p, got); d != "" {
		t.Errorf("FindPristine (-want +got):\n%s", d)
	}
	_, err = s.FindPristine(ctx, "repo_a", "other")
	wantClass(t, err, errdefs.ErrNotFound)

	// RefCount follows the workspaces that use the checkout.
	for _, id := range []string{"ws_1", "ws_2"} {
		if err := s.CreateWorkspace(ctx, ws(id, "repo_a", "pc_1")); err != nil {
			t.Fatal(err)
		}
	}
	got, _ = s.GetPristine(ctx, "pc_1")
	if got.RefCount != 2 {
		t.Errorf("RefCount = %d, want 2", got.RefCount)
	}
	wantClass(t, s.DeletePristine(ctx, "pc_1"), errdefs.ErrConflict)
	for _, id := range []string{"ws_1", "ws_2"} {
		if err := s.DeleteWorkspace(ctx, id); err != nil {
			t.Fatal(err)
		}
	}
	list, err := s.ListPristines(ctx, "repo_a")
	if err != nil || len(list) != 1 || list[0].RefCount != 0 {
		t.Fatalf("ListPristines = %+v, %v; want one with RefCount 0", list, err)
	}
	later := n.Add(time.Minute)
	if err := s.TouchPristine(ctx, "pc_1", later); err != nil {
		t.Fatal(err)
	}
	got, _ = s.GetPristine(ctx, "pc_1")
	if !got.LastUsedAt.Equal(later) {
		t.Errorf("LastUsedAt = %v, want %v", got.LastUsedAt, later)
	}
	if err := s.DeletePristine(ctx, "pc_1"); err != nil {
		t.Fatal(err)
	}
	_, err = s.GetPristine(ctx, "pc_1")
	wantClass(t, err, errdefs.ErrNotFound)
}

func testWorkspaces(t *testing.T, s store.Store) {
	ctx := t.Context()
	for _, id := range []string{"repo_a", "repo_b"} {
		if err := s.CreateRepo(ctx, repo(id)); err != nil {
			t.Fatal(err)
		}
	}
	w := ws("ws_1", "repo_a", "")
	w.State = store.WorkspaceCreating
	if err := s.CreateWorkspace(ctx, w); err != nil {
		t.Fatal(err)
	}
	wantClass(t, s.CreateWorkspace(ctx, w), errdefs.ErrConflict)
	// A workspace of a missing repo is refused.
	if err := s.CreateWorkspace(ctx, ws("ws_x", "repo_missing", "")); err == nil {
		t.Fatal("created a workspace for a missing repo")
	}

	w.State = store.WorkspaceReady
	w.Dirty = true
	w.SizeBytes = 99
	w.UpdatedAt = now().Add(time.Second)
	if err := s.UpdateWorkspace(ctx, w); err != nil {
		t.Fatal(err)
	}
	got, err := s.GetWorkspace(ctx, "ws_1")
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff(w, got); d != "" {
		t.Errorf("GetWorkspace (-want +got):\n%s", d)
	}

	fork := ws("ws_2", "repo_a", "")
	fork.ParentID = "ws_1"
	if err := s.CreateWorkspace(ctx, fork); err != nil {
		t.Fatal(err)
	}
	if err := s.CreateWorkspace(ctx, ws("ws_3", "repo_b", "")); err != nil {
		t.Fatal(err)
	}
	all, _ := s.ListWorkspaces(ctx, "")
	ofA, _ := s.ListWorkspaces(ctx, "repo_a")
	id := func(w store.Workspace) string { return w.ID }
	if d := cmp.Diff([]string{"ws_1", "ws_2", "ws_3"}, ids(all, id)); d != "" {
		t.Errorf("ListWorkspaces all (-want +got):\n%s", d)
	}
	if d := cmp.Diff([]string{"ws_1", "ws_2"}, ids(ofA, id)); d != "" {
		t.Errorf("ListWorkspaces repo_a (-want +got):\n%s", d)
	}
	if got, _ := s.GetWorkspace(ctx, "ws_2"); got.ParentID != "ws_1" {
		t.Errorf("ParentID = %q", got.ParentID)
	}

	wantClass(t, s.UpdateWorkspace(ctx, ws("ws_missing", "repo_a", "")), errdefs.ErrNotFound)
	// A workspace made ready and its event commit together, or neither
	// does.
	fork.State = store.WorkspaceReady
	fork.UpdatedAt = now().Add(2 * time.Second)
	ev, err := s.UpdateWorkspaceEvent(ctx, fork, store.Event{Actor: "api", Type: "workspace.forked", RepoID: "repo_a", WorkspaceID: "ws_2", Detail: `{"parent_id":"ws_1"}`})
	if err != nil || ev.ID == 0 || ev.Time.IsZero() {
		t.Fatalf("UpdateWorkspaceEvent = %+v, %v", ev, err)
	}
	got, _ = s.GetWorkspace(ctx, "ws_2")
	if d := cmp.Diff(fork, got); d != "" {
		t.Errorf("after UpdateWorkspaceEvent (-want +got):\n%s", d)
	}
	_, err = s.UpdateWorkspaceEvent(ctx, ws("ws_missing", "repo_a", ""), store.Event{Actor: "api", Type: "workspace.forked", WorkspaceID: "ws_missing"})
	wantClass(t, err, errdefs.ErrNotFound)
	if evs, _ := s.ListEvents(ctx, store.EventFilter{Type: "workspace.forked"}); len(evs) != 1 || evs[0].ID != ev.ID || evs[0].Detail != `{"parent_id":"ws_1"}` {
		t.Errorf("workspace.forked events = %+v, want only the committed one", evs)
	}
	if err := s.DeleteWorkspace(ctx, "ws_1"); err != nil {
		t.Fatal(err)
	}
	wantClass(t, s.DeleteWorkspace(ctx, "ws_1"), errdefs.ErrNotFound)
	_, err = s.GetWorkspace(ctx, "ws_1")
	wantClass(t, err, errdefs.ErrNotFound)
}

func testEvents(t *testing.T, s store.Store) {
	ctx := t.Context()
	var last int64
	for i := range 5 {
		e, err := s.AppendEvent(ctx, store.Event{Actor: "api", Type: fmt.Sprintf("t.%d", i%2), WorkspaceID: fmt.Sprintf("ws_%d", i%2), Detail: `{"i":1}`})
		if err != nil {
			t.Fatal(err)
		}
		if e.ID <= last || e.Time.IsZero() {
			t.Fatalf("event %d: id %d after %d, time %v", i, e.ID, last, e.Time)
		}
		last = e.ID
	}
	all, _ := s.ListEvents(ctx, store.EventFilter{})
	if len(all) != 5 {
		t.Fatalf("got %d events, want 5", len(all))
	}
	ws0, _ := s.ListEvents(ctx, store.EventFilter{WorkspaceID: "ws_0"})
	if len(ws0) != 3 {
		t.Errorf("ws_0 events = %d, want 3", len(ws0))
	}
	after, _ := s.ListEvents(ctx, store.EventFilter{AfterID: all[2].ID})
	if d := cmp.Diff([]int64{all[3].ID, all[4].ID}, ids(after, func(e store.Event) int64 { return e.ID })); d != "" {
		t.Errorf("AfterID (-want +got):\n%s", d)
	}
	typ, _ := s.ListEvents(ctx, store.EventFilter{Type: "t.1", Limit: 1})
	if len(typ) != 1 || typ[0].Type != "t.1" {
		t.Errorf("Type+Limit = %+v", typ)
	}
	// The newest first, paged back with BeforeID; filters by type prefix
	// (an _ in it is a character, not LIKE's wildcard), actor and object.
	more := []store.Event{
		{Actor: "daemon", Type: "sandbox.oom_killed", SandboxID: "sb_9", WorkspaceID: "ws_9"},
		{Actor: "daemon", Type: "sandbox.oomXkilled", RepoID: "repo_9"},
		{Actor: "cli", Type: "sandbox.created", SandboxID: "sb_9"},
	}
	for _, e := range more {
		if _, err := s.AppendEvent(ctx, e); err != nil {
			t.Fatal(err)
		}
	}
	all, _ = s.ListEvents(ctx, store.EventFilter{})
	evID := func(e store.Event) int64 { return e.ID }
	newest, _ := s.ListEvents(ctx, store.EventFilter{Newest: true, Limit: 3})
	if d := cmp.Diff([]int64{all[7].ID, all[6].ID, all[5].ID}, ids(newest, evID)); d != "" {
		t.Errorf("Newest (-want +got):\n%s", d)
	}
	back, _ := s.ListEvents(ctx, store.EventFilter{Newest: true, Limit: 2, BeforeID: all[5].ID})
	if d := cmp.Diff([]int64{all[4].ID, all[3].ID}, ids(back, evID)); d != "" {
		t.Errorf("Newest before (-want +got):\n%s", d)
	}
	for name, c := range map[string]struct {
		f    store.EventFilter
		want []int64
	}{
		"type prefix":        {store.EventFilter{TypePrefix: "sandbox.oom_"}, []int64{all[5].ID}},
		"type prefix, wider": {store.EventFilter{TypePrefix: "sandbox."}, []int64{all[5].ID, all[6].ID, all[7].ID}},
		"actor":              {store.EventFilter{Actor: "daemon"}, []int64{all[5].ID, all[6].ID}},
		"object sandbox":     {store.EventFilter{Object: "sb_9"}, []int64{all[5].ID, all[7].ID}},
		"object workspace":   {store.EventFilter{Object: "ws_9"}, []int64{all[5].ID}},
		"object repo":        {store.EventFilter{Object: "repo_9"}, []int64{all[6].ID}},
		"object and actor":   {store.EventFilter{Object: "sb_9", Actor: "cli", Newest: true}, []int64{all[7].ID}},
		"object, no such":    {store.EventFilter{Object: "sb_"}, []int64{}},
	} {
		got, err := s.ListEvents(ctx, c.f)
		if err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		if d := cmp.Diff(c.want, ids(got, evID)); d != "" {
			t.Errorf("%s (-want +got):\n%s", name, d)
		}
	}
}

// testConcurrent checks that parallel read-then-write work from many
// goroutines neither fails with "database is locked" nor loses writes.
func testConcurrent(t *testing.T, s store.Store) {
	ctx := t.Context()
	if err := s.CreateRepo(ctx, repo("repo_a")); err != nil {
		t.Fatal(err)
	}
	const n = 16
	var wg sync.WaitGroup
	errs := make(chan error, n*10)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			id := fmt.Sprintf("ws_%02d", i)
			if err := s.CreateWorkspace(ctx, ws(id, "repo_a", "")); err != nil {
				errs <- err
				return
			}
			for j := range 5 {
				w, err := s.GetWorkspace(ctx, id)
				if err != nil {
					errs <- err
					return
				}
				w.SizeBytes = int64(j)
				if err := s.UpdateWorkspace(ctx, w); err != nil {
					errs <- err
				}
				if _, err := s.AppendEvent(ctx, store.Event{Actor: "test", Type: "x", WorkspaceID: id}); err != nil {
					errs <- err
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	list, _ := s.ListWorkspaces(ctx, "")
	events, _ := s.ListEvents(ctx, store.EventFilter{Limit: 10000})
	if len(list) != n || len(events) != n*5 {
		t.Errorf("got %d workspaces and %d events, want %d and %d", len(list), len(events), n, n*5)
	}
}

func ids[T any, K comparable](xs []T, f func(T) K) []K {
	out := []K{}
	for _, x := range xs {
		out = append(out, f(x))
	}
	return out
}

func sandbox(id, wsID string) store.Sandbox {
	n := now()
	return store.Sandbox{ID: id, WorkspaceID: wsID, Backend: "docker", BackendRef: "c0ffee", Image: "agentbox/busybox:latest",
		Spec: `{"backend":"docker"}`, State: "running", TokenHash: "abc", CreatedAt: n, UpdatedAt: n, LastActivityAt: n}
}

func testSandboxes(t *testing.T, s store.Store) {
	ctx := t.Context()
	if err := s.CreateRepo(ctx, repo("repo_a")); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"ws_1", "ws_2"} {
		if err := s.CreateWorkspace(ctx, ws(id, "repo_a", "")); err != nil {
			t.Fatal(err)
		}
	}
	sb := sandbox("sb_1", "ws_1")
	if err := s.CreateSandbox(ctx, sb); err != nil {
		t.Fatal(err)
	}
	wantClass(t, s.CreateSandbox(ctx, sb), errdefs.ErrConflict)
	if err := s.CreateSandbox(ctx, sandbox("sb_x", "ws_missing")); err == nil {
		t.Error("created a sandbox for a missing workspace")
	}
	got, err := s.GetSandbox(ctx, "sb_1")
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff(sb, got); d != "" {
		t.Errorf("GetSandbox (-want +got):\n%s", d)
	}
	sb.State, sb.BackendRef, sb.Replaces = "lost", "", "sb_0"
	sb.LastActivityAt = now().Add(time.Minute)
	if err := s.UpdateSandbox(ctx, sb); err != nil {
		t.Fatal(err)
	}
	got, _ = s.GetSandbox(ctx, "sb_1")
	if d := cmp.Diff(sb, got); d != "" {
		t.Errorf("after UpdateSandbox (-want +got):\n%s", d)
	}
	// A state change and its event commit together, or neither does.
	sb.State, sb.BackendRef = "running", "ref-2"
	ev, err := s.UpdateSandboxEvent(ctx, sb, store.Event{Actor: "api", Type: "sandbox.created", SandboxID: "sb_1", Detail: `{"ref":"ref-2"}`})

	if err != nil || ev.ID == 0 || ev.Time.IsZero() {
		t.Fatalf("UpdateSandboxEvent = %+v, %v", ev, err)
	}
	got, _ = s.GetSandbox(ctx, "sb_1")
	if d := cmp.Diff(sb, got); d != "" {
		t.Errorf("after UpdateSandboxEvent (-want +got):\n%s", d)
	}
	_, err = s.UpdateSandboxEvent(ctx, sandbox("sb_missing", "ws_2"), store.Event{Actor: "api", Type: "sandbox.created", SandboxID: "sb_missing"})
	wantClass(t, err, errdefs.ErrNotFound)
	if evs, _ := s.ListEvents(ctx, store.EventFilter{Type: "sandbox.created"}); len(evs) != 1 || evs[0].ID != ev.ID || evs[0].Detail != `{"ref":"ref-2"}` {
		t.Errorf("sandbox.created events = %+v, want only the committed one", evs)
	}
	// Back as it was, for the filters below.
	sb.State, sb.BackendRef = "lost", ""
	if err := s.UpdateSandbox(ctx, sb); err != nil {
		t.Fatal(err)
	}
	if err := s.CreateSandbox(ctx, sandbox("sb_2", "ws_2")); err != nil {
		t.Fatal(err)
	}
	id := func(x store.Sandbox) string { return x.ID }
	for _, tc := range []struct {
		f    store.SandboxFilter
		want []string
	}{
		{store.SandboxFilter{}, []string{"sb_1", "sb_2"}},
		{store.SandboxFilter{WorkspaceID: "ws_2"}, []string{"sb_2"}},
		{store.SandboxFilter{State: "lost"}, []string{"sb_1"}},
	} {
		list, err := s.ListSandboxes(ctx, tc.f)
		if err != nil {
			t.Fatal(err)
		}
		if d := cmp.Diff(tc.want, ids(list, id)); d != "" {
			t.Errorf("ListSandboxes(%+v) (-want +got):\n%s", tc.f, d)
		}
	}
	// A workspace with sandbox rows cannot be deleted before them.
	wantClass(t, s.DeleteWorkspace(ctx, "ws_1"), errdefs.ErrConflict)
	if err := s.DeleteSandbox(ctx, "sb_1"); err != nil {
		t.Fatal(err)
	}
	wantClass(t, s.DeleteSandbox(ctx, "sb_1"), errdefs.ErrNotFound)
	if err := s.DeleteWorkspace(ctx, "ws_1"); err != nil {
		t.Fatal(err)
	}
	wantClass(t, s.UpdateSandbox(ctx, sandbox("sb_missing", "ws_2")), errdefs.ErrNotFound)
}

func testExecs(t *testing.T, s store.Store) {
	ctx := t.Context()
	base := now()
	for i := range 5 {
		e := store.Exec{ID: fmt.Sprintf("ex_%d", i), SandboxID: fmt.Sprintf("sb_%d", i%2), WorkspaceID: "ws_1",
			Argv: `["true"]`, State: store.ExecRunning, StartedAt: base.Add(time.Duration(i) * time.Second)}
		if err := s.CreateExec(ctx, e); err != nil {
			t.Fatal(err)
		}
	}
	done := store.Exec{ID: "ex_3", SandboxID: "sb_1", WorkspaceID: "ws_1", Argv: `["true"]`, State: store.ExecTimedOut,
		ExitCode: 137, Signal: 9, TimedOut: true, OOM: true, CPUNanos: 5e6, PeakMemBytes: 1 << 20,
		StdoutBytes: 10, StderrBytes: 20, StartedAt: base.Add(3 * time.Second), FinishedAt: base.Add(4 * time.Second)}
	if err := s.FinishExec(ctx, done); err != nil {
		t.Fatal(err)
	}
	got, err := s.GetExec(ctx, "ex_3")
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff(done, got); d != "" {
		t.Errorf("GetExec (-want +got):\n%s", d)
	}
	wantClass(t, s.FinishExec(ctx, store.Exec{ID: "ex_missing"}), errdefs.ErrNotFound)
	id := func(e store.Exec) string { return e.ID }
	last2, _ := s.ListExecs(ctx, store.ExecFilter{WorkspaceID: "ws_1", Limit: 2})
	if d := cmp.Diff([]string{"ex_3", "ex_4"}, ids(last2, id)); d != "" {
		t.Errorf("ListExecs last 2 (-want +got):\n%s", d)
	}
	sb1, _ := s.ListExecs(ctx, store.ExecFilter{SandboxID: "sb_1"})
	if d := cmp.Diff([]string{"ex_1", "ex_3"}, ids(sb1, id)); d != "" {
		t.Errorf("ListExecs sb_1 (-want +got):\n%s", d)
	}
}

// testExecActivity: finishing an exec moves its sandbox's last activity
// forward and changes nothing else of it, so a state change made while
// the command ran (a stop, a loss) is not undone.
func testExecActivity(t *testing.T, s store.Store) {
	ctx := t.Context()
	if err := s.CreateRepo(ctx, repo("repo_a")); err != nil {
		t.Fatal(err)
	}
	if err := s.CreateWorkspace(ctx, ws("ws_1", "repo_a", "")); err != nil {
		t.Fatal(err)
	}
	sb := sandbox("sb_1", "ws_1")
	if err := s.CreateSandbox(ctx, sb); err != nil {
		t.Fatal(err)
	}
	start := sb.LastActivityAt.Add(time.Second)
	e := store.Exec{ID: "ex_1", SandboxID: "sb_1", WorkspaceID: "ws_1", Argv: `["true"]`, State: store.ExecRunning, StartedAt: start}
	if err := s.CreateExec(ctx, e); err != nil {
		t.Fatal(err)
	}
	// While it runs, the sandbox is stopped.
	stopped := sb
	stopped.State = "stopped"
	if err := s.UpdateSandbox(ctx, stopped); err != nil {
		t.Fatal(err)
	}
	e.State, e.FinishedAt = store.ExecExited, start.Add(time.Minute)
	if err := s.FinishExec(ctx, e); err != nil {
		t.Fatal(err)
	}
	want := stopped
	want.LastActivityAt = e.FinishedAt
	got, err := s.GetSandbox(ctx, "sb_1")
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("sandbox after FinishExec (-want +got):\n%s", d)
	}
	// An exec that finishes late never moves the activity back.
	old := store.Exec{ID: "ex_0", SandboxID: "sb_1", WorkspaceID: "ws_1", Argv: `["true"]`, State: store.ExecRunning, StartedAt: start}
	if err := s.CreateExec(ctx, old); err != nil {
		t.Fatal(err)
	}
	old.State, old.FinishedAt = store.ExecExited, start.Add(time.Second)
	if err := s.FinishExec(ctx, old); err != nil {
		t.Fatal(err)
	}
	if got, _ := s.GetSandbox(ctx, "sb_1"); !got.LastActivityAt.Equal(e.FinishedAt) {
		t.Errorf("last activity %v after an earlier exec finished, want %v", got.LastActivityAt, e.FinishedAt)
	}
}

// testSecrets: sealed secrets are stored whole, replaced in place keeping
// their creation time, listed without their sealed bytes, and deleted.
func testSecrets(t *testing.T, s store.Store) {
	ctx := t.Context()
	t0 := now()
	a := store.SealedSecret{Name: "API_TOKEN", Nonce: []byte("nonce-000001"), Sealed: []byte{1, 2, 3, 0, 255}, CreatedAt: t0, UpdatedAt: t0}
	if err := s.PutSecret(ctx, a); err != nil {
		t.Fatal(err)
	}
	if err := s.PutSecret(ctx, store.SealedSecret{Name: "B", Nonce: []byte("n"), Sealed: []byte("s"), CreatedAt: t0, UpdatedAt: t0}); err != nil {
		t.Fatal(err)
	}
	got, err := s.GetSecret(ctx, "API_TOKEN")
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff(a, got); d != "" {
		t.Errorf("GetSecret (-want +got):\n%s", d)
	}
	// A second put replaces the value and keeps the creation time.
	b := a
	b.Nonce, b.Sealed, b.CreatedAt, b.UpdatedAt = []byte("nonce-000002"), []byte("new"), t0.Add(time.Hour), t0.Add(time.Hour)
	if err := s.PutSecret(ctx, b); err != nil {
		t.Fatal(err)
	}
	got, _ = s.GetSecret(ctx, "API_TOKEN")
	want := b
	want.CreatedAt = t0
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("GetSecret after a replace (-want +got):\n%s", d)
	}
	list, err := s.ListSecrets(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 2 || list[0].Name != "API_TOKEN" || list[1].Name != "B" || list[0].Sealed != nil || list[0].Nonce != nil {
		t.Errorf("ListSecrets = %+v, want the two names in order without their values", list)
	}
	wantClass(t, s.PutSecret(ctx, store.SealedSecret{Name: "EMPTY"}), errdefs.ErrInvalid)
	if err := s.DeleteSecret(ctx, "B"); err != nil {
		t.Fatal(err)
	}
	_, err = s.GetSecret(ctx, "B")
	wantClass(t, err, errdefs.ErrNotFound)
	wantClass(t, s.DeleteSecret(ctx, "B"), errdefs.ErrNotFound)
}
