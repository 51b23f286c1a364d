package storetest

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/agentbox/agentbox/internal/errdefs"
	"github.com/agentbox/agentbox/internal/store"
)

// testUsage: execs and egress sum per task label, separately, and since a
// time; a sandbox's usage sums its execs and keeps its cgroup and egress
// totals.
func testUsage(t *testing.T, s store.Store) {
	ctx := t.Context()
	if err := s.CreateRepo(ctx, repo("repo_a")); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"ws_a", "ws_b"} {
		if err := s.CreateWorkspace(ctx, ws(id, "repo_a", "")); err != nil {
			t.Fatal(err)
		}
		if err := s.CreateSandbox(ctx, sandbox("sb_"+id[3:], id)); err != nil {
			t.Fatal(err)
		}
	}
	base := now().Add(-time.Hour)
	type run struct {
		id, sb, ws, task string
		at               time.Duration
		cpu, mem, wall   int64
		out              int64
	}
	runs := []run{
		{"ex_1", "sb_a", "ws_a", "alpha", 0, 100, 1000, 10, 5},
		{"ex_2", "sb_a", "ws_a", "alpha", 10 * time.Minute, 200, 3000, 20, 7},
		{"ex_3", "sb_b", "ws_b", "beta", 20 * time.Minute, 50, 500, 5, 1},
	}
	for _, r := range runs {
		e := store.Exec{ID: r.id, SandboxID: r.sb, WorkspaceID: r.ws, Task: r.task, Argv: `["x"]`, State: store.ExecRunning, StartedAt: base.Add(r.at)}
		if err := s.CreateExec(ctx, e); err != nil {
			t.Fatal(err)
		}
		e.State, e.CPUNanos, e.PeakMemBytes, e.WallNanos, e.StdoutBytes, e.StderrBytes, e.FinishedAt =
			store.ExecExited, r.cpu, r.mem, r.wall, r.out, 1, base.Add(r.at+time.Second)
		if err := s.FinishExec(ctx, e); err != nil {
			t.Fatal(err)
		}
		if got, err := s.GetExec(ctx, r.id); err != nil || got.Task != r.task || got.WallNanos != r.wall {
			t.Fatalf("GetExec %s = task %q wall %d, %v", r.id, got.Task, got.WallNanos, err)
		}
	}
	rev, err := s.RecordEgress(ctx, store.EgressUsage{Time: base.Add(5 * time.Minute), SandboxID: "sb_a", WorkspaceID: "ws_a", Task: "alpha", BytesUp: 10, BytesDown: 100},
		store.Event{Actor: "sandbox", Type: "egress.allowed", SandboxID: "sb_a"})
	if err != nil || rev.ID == 0 || rev.Time.IsZero() {
		t.Fatalf("RecordEgress = %+v, %v", rev, err)
	}
	// A batch counts as its decisions one by one would; a decision that
	// moved nothing is only its event.
	batch := []store.EgressRecord{
		{Usage: &store.EgressUsage{Time: base.Add(15 * time.Minute), SandboxID: "sb_a", WorkspaceID: "ws_a", Task: "alpha", BytesUp: 1, BytesDown: 2},
			Event: store.Event{Actor: "sandbox", Type: "egress.allowed", SandboxID: "sb_a"}},
		{Event: store.Event{Actor: "sandbox", Type: "egress.denied", SandboxID: "sb_a"}},
		// A sandbox whose row is gone still counts for its task.
		{Usage: &store.EgressUsage{Time: base.Add(15 * time.Minute), SandboxID: "sb_gone", WorkspaceID: "ws_gone", Task: "gamma", BytesUp: 3, BytesDown: 4},
			Event: store.Event{Actor: "sandbox", Type: "egress.allowed", SandboxID: "sb_gone"}},
	}
	if err := s.RecordEgressBatch(ctx, batch); err != nil {
		t.Fatalf("RecordEgressBatch: %v", err)
	}
	sbEvents, err := s.ListEvents(ctx, store.EventFilter{SandboxID: "sb_a"})
	if err != nil || len(sbEvents) != 3 || sbEvents[2].Type != "egress.denied" || sbEvents[2].Time.IsZero() {
		t.Fatalf("events of sb_a after a batch = %+v, %v; want 3, the denial last", sbEvents, err)
	}

	all, err := s.UsageByTask(ctx, store.UsageFilter{})
	if err != nil {
		t.Fatal(err)
	}
	want := []store.TaskUsage{
		{Task: "alpha", Workspaces: 1, Execs: 2, CPUNanos: 300, PeakMemBytes: 3000, WallNanos: 30, OutputBytes: 14, EgressBytesUp: 11, EgressBytesDown: 102},
		{Task: "beta", Workspaces: 1, Execs: 1, CPUNanos: 50, PeakMemBytes: 500, WallNanos: 5, OutputBytes: 2},
		{Task: "gamma", Workspaces: 1, EgressBytesUp: 3, EgressBytesDown: 4},
	}
	if d := cmp.Diff(want, all); d != "" {
		t.Errorf("UsageByTask (-want +got):\n%s", d)
	}
	byWS, err := s.UsageByTask(ctx, store.UsageFilter{ByWorkspace: true})
	if err != nil {
		t.Fatal(err)
	}
	want = []store.TaskUsage{
		{Task: "alpha", WorkspaceID: "ws_a", Workspaces: 1, Execs: 2, CPUNanos: 300, PeakMemBytes: 3000, WallNanos: 30, OutputBytes: 14, EgressBytesUp: 11, EgressBytesDown: 102},
		{Task: "beta", WorkspaceID: "ws_b", Workspaces: 1, Execs: 1, CPUNanos: 50, PeakMemBytes: 500, WallNanos: 5, OutputBytes: 2},
		{Task: "gamma", WorkspaceID: "ws_gone", Workspaces: 1, EgressBytesUp: 3, EgressBytesDown: 4},
	}
	if d := cmp.Diff(want, byWS); d != "" {
		t.Errorf("UsageByTask by workspace (-want +got):\n%s", d)
	}
	since, err := s.UsageByTask(ctx, store.UsageFilter{Since: base.Add(10 * time.Minute)})
	if err != nil {
		t.Fatal(err)
	}
	want = []store.TaskUsage{
		{Task: "alpha", Workspaces: 1, Execs: 1, CPUNanos: 200, PeakMemBytes: 3000, WallNanos: 20, OutputBytes: 8, EgressBytesUp: 1, EgressBytesDown: 2},
		{Task: "beta", Workspaces: 1, Execs: 1, CPUNanos: 50, PeakMemBytes: 500, WallNanos: 5, OutputBytes: 2},
		{Task: "gamma", Workspaces: 1, EgressBytesUp: 3, EgressBytesDown: 4},
	}
	if d := cmp.Diff(want, since); d != "" {
		t.Errorf("UsageByTask since (-want +got):\n%s", d)
	}
	one, err := s.UsageByTask(ctx, store.UsageFilter{Task: "beta", Since: base})
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff([]store.TaskUsage{{Task: "beta", Workspaces: 1, Execs: 1, CPUNanos: 50, PeakMemBytes: 500, WallNanos: 5, OutputBytes: 2}}, one); d != "" {
		t.Errorf("UsageByTask beta (-want +got):\n%s", d)
	}
	none, err := s.UsageByTask(ctx, store.UsageFilter{Since: base.Add(2 * time.Hour)})
	if err != nil || len(none) != 0 {
		t.Errorf("UsageByTask in the future = %v, %v; want nothing", none, err)
	}

	if err := s.SetSandboxCgroupUsage(ctx, "sb_a", 999, 1<<20); err != nil {
		t.Fatal(err)
	}
	wantClass(t, s.SetSandboxCgroupUsage(ctx, "sb_missing", 1, 1), errdefs.ErrNotFound)
	sbu, err := s.SandboxUsage(ctx, "sb_a")
	if err != nil {
		t.Fatal(err)
	}
	wantSB := store.SandboxUsage{SandboxID: "sb_a", Execs: 2, CPUNanos: 300, PeakMemBytes: 3000, WallNanos: 30, OutputBytes: 14,
		CgroupCPUNanos: 999, CgroupPeakMemBytes: 1 << 20, EgressBytesUp: 11, EgressBytesDown: 102}
	if d := cmp.Diff(wantSB, sbu); d != "" {
		t.Errorf("SandboxUsage (-want +got):\n%s", d)
	}
	_, err = s.SandboxUsage(ctx, "sb_missing")
	wantClass(t, err, errdefs.ErrNotFound)

	// An exec's end and its event commit together, or neither does.
	e := store.Exec{ID: "ex_9", SandboxID: "sb_b", WorkspaceID: "ws_b", Argv: `["x"]`, State: store.ExecRunning, StartedAt: base}
	if err := s.CreateExec(ctx, e); err != nil {
		t.Fatal(err)
	}
	e.State, e.FinishedAt = store.ExecExited, base.Add(time.Second)
	ev, err := s.FinishExecEvent(ctx, e, store.Event{Actor: "api", Type: "exec.finished", SandboxID: "sb_b", Detail: `{"exec_id":"ex_9"}`})
	if err != nil || ev.ID == 0 {
		t.Fatalf("FinishExecEvent = %+v, %v", ev, err)
	}
	if got, _ := s.GetExec(ctx, "ex_9"); got.State != store.ExecExited {
		t.Errorf("exec state after FinishExecEvent = %s", got.State)
	}
	_, err = s.FinishExecEvent(ctx, store.Exec{ID: "ex_missing"}, store.Event{Actor: "api", Type: "exec.finished"})
	wantClass(t, err, errdefs.ErrNotFound)
	evs, _ := s.ListEvents(ctx, store.EventFilter{Type: "exec.finished"})
	if len(evs) != 1 || evs[0].ID != ev.ID || evs[0].Detail != `{"exec_id":"ex_9"}` {
		t.Errorf("exec.finished events = %+v, want only the committed one", evs)
	}
}
