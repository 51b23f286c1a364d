package storetest

import (
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/agentbox/agentbox/internal/apitypes"
	"github.com/agentbox/agentbox/internal/errdefs"
	"github.com/agentbox/agentbox/internal/store"
)

func testNodes(t *testing.T, s store.Store) {
	ctx := t.Context()
	t0 := now()
	a := store.Node{ID: "node_a", Host: "h1", PID: 10, DataDir: "/d/a", Addr: "unix:///d/a/agentbox.sock", Version: "v1", StartedAt: t0, HeartbeatAt: t0}
	b := store.Node{ID: "node_b", Host: "h2", PID: 20, DataDir: "/d/b", Addr: "tcp://10.0.0.2:7070", Version: "v1", StartedAt: t0, HeartbeatAt: t0}
	for _, n := range []store.Node{b, a} {
		if err := s.RegisterNode(ctx, n); err != nil {
			t.Fatal(err)
		}
	}
	got, err := s.ListNodes(ctx, t0.Add(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	a.State, b.State = apitypes.NodeUp, apitypes.NodeUp
	if diff := cmp.Diff([]store.Node{a, b}, got); diff != "" {
		t.Errorf("ListNodes (-want +got):\n%s", diff)
	}
	// a beats, b falls silent: past the lease b is lost and a is up.
	later := t0.Add(store.NodeLease)
	if err := s.HeartbeatNode(ctx, "node_a", later); err != nil {
		t.Fatal(err)
	}
	got, _ = s.ListNodes(ctx, later.Add(time.Second))
	if len(got) != 2 || got[0].State != apitypes.NodeUp || got[1].State != apitypes.NodeLost || !got[0].HeartbeatAt.Equal(later) {
		t.Errorf("after the lease: %+v", got)
	}
	wantClass(t, s.HeartbeatNode(ctx, "node_nope", later), errdefs.ErrNotFound)
	// A clean stop, then a restart under the same ID.
	if err := s.StopNode(ctx, "node_b", later); err != nil {
		t.Fatal(err)
	}
	got, _ = s.ListNodes(ctx, later.Add(time.Hour))
	if got[1].State != apitypes.NodeStopped || got[1].StoppedAt == nil || !got[1].StoppedAt.Equal(later) {
		t.Errorf("after a stop: %+v", got[1])
	}
	b.PID, b.StartedAt, b.HeartbeatAt = 21, later, later
	if err := s.RegisterNode(ctx, b); err != nil {
		t.Fatal(err)
	}
	got, _ = s.ListNodes(ctx, later)
	if got[1].State != apitypes.NodeUp || got[1].PID != 21 || got[1].StoppedAt != nil {
		t.Errorf("after a restart: %+v", got[1])
	}
}

// testOwnership covers what nodes sharing a store do with each other's
// objects: claim rows made before nodes, count their load, mark a lost
// node's sandboxes lost (each once, however many nodes try at once),
// adopt a lost shared node's plain workspaces, and agree on one cluster
// value.
func testOwnership(t *testing.T, s store.Store) {
	ctx := t.Context()
	t0 := now()
	lease := 3 * time.Second
	for _, n := range []store.Node{
		{ID: "node_a", Host: "h", PID: 1, DataDir: "/d/a", StartedAt: t0, HeartbeatAt: t0, Lease: lease, Shared: true},
		{ID: "node_b", Host: "h", PID: 2, DataDir: "/d/b", StartedAt: t0, HeartbeatAt: t0, Lease: lease, Shared: true},
		{ID: "node_c", Host: "h", PID: 3, DataDir: "/d/c", StartedAt: t0, HeartbeatAt: t0, Lease: lease},
	} {
		if err := s.RegisterNode(ctx, n); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.CreateRepo(ctx, repo("repo_o")); err != nil {
		t.Fatal(err)
	}
	// A workspace and sandbox from before nodes, then owned ones.
	old := ws("ws_old", "repo_o", "")
	if err := s.CreateWorkspace(ctx, old); err != nil {
		t.Fatal(err)
	}
	if err := s.CreateSandbox(ctx, sandbox("sb_old", "ws_old")); err != nil {
		t.Fatal(err)
	}
	n, err := s.ClaimUnowned(ctx, "node_a")
	if err != nil || n != 2 {
		t.Fatalf("ClaimUnowned = %d, %v; want 2 rows", n, err)
	}
	if n, err := s.ClaimUnowned(ctx, "node_b"); err != nil || n != 0 {
		t.Fatalf("second ClaimUnowned = %d, %v; want 0 rows", n, err)
	}
	if w, _ := s.GetWorkspace(ctx, "ws_old"); w.Node != "node_a" {
		t.Errorf("claimed workspace owned by %q", w.Node)
	}
	// node_b: four copy workspaces (one with a quota), one overlay, and
	// 20 running sandboxes and a stopped one; node_c one workspace.
	for i, w := range []store.Workspace{ws("ws_b1", "repo_o", ""), ws("ws_b2", "repo_o", ""), ws("ws_b3", "repo_o", ""), ws("ws_c1", "repo_o", ""),
		ws("ws_b4", "repo_o", ""), ws("ws_b5", "repo_o", "")} {
		w.Node = "node_b"
		if i < 2 || i > 3 {
			w.Driver = "copy"
		}
		if i == 1 {
			w.DiskQuota = 1 << 30
		}
		if i == 3 {
			w.Node, w.Driver = "node_c", "copy"
		}
		if err := s.CreateWorkspace(ctx, w); err != nil {
			t.Fatal(err)
		}
	}
	var want []string
	for i := range 21 {
		sb := sandbox(fmt.Sprintf("sb_b%02d", i), "ws_b1")
		sb.Node = "node_b"
		if i == 20 {
			sb.State = "stopped"
		} else {
			want = append(want, sb.ID)
		}
		if err := s.CreateSandbox(ctx, sb); err != nil {
			t.Fatal(err)
		}
	}
	if got, _ := s.GetSandbox(ctx, "sb_b00"); got.Node != "node_b" {
		t.Errorf("sandbox owned by %q, want node_b", got.Node)
	}
	nodes, err := s.ListNodes(ctx, t0)
	if err != nil {
		t.Fatal(err)
	}
	load := map[string][2]int{}
	for _, n := range nodes {
		load[n.ID] = [2]int{n.Workspaces, n.Sandboxes}
		if n.Lease != lease {
			t.Errorf("node %s lease %s, want %s", n.ID, n.Lease, lease)
		}
	}
	if diff := cmp.Diff(map[string][2]int{"node_a": {1, 1}, "node_b": {5, 20}, "node_c": {1, 0}}, load); diff != "" {
		t.Errorf("load (-want +got):\n%s", diff)
	}

	// Within its lease node_b is not lost: nothing is marked or adopted.
	within := t0.Add(lease - time.Millisecond)
	if got, err := s.MarkNodeLost(ctx, "node_b", within, "node node_a"); err != nil || len(got) != 0 {
		t.Fatalf("MarkNodeLost within the lease = %v, %v", got, err)
	}
	if got, err := s.AdoptWorkspaces(ctx, "node_b", "node_a", within, 0); err != nil || len(got) != 0 {
		t.Fatalf("AdoptWorkspaces within the lease = %v, %v", got, err)
	}
	// Past it, node_a and node_c both try at once, several times: every
	// running sandbox is marked once, by one of them.
	past := t0.Add(lease + time.Second)
	var mu sync.Mutex
	var marked []string
	var wg sync.WaitGroup
	for i := range 6 {
		wg.Go(func() {
			who := []string{"node node_a", "node node_c"}[i%2]
			got, err := s.MarkNodeLost(ctx, "node_b", past, who)
			if err != nil {
				t.Error(err)
			}
			mu.Lock()
			marked = append(marked, got...)
			mu.Unlock()
		})
	}
	wg.Wait()
	slices.Sort(marked)
	if diff := cmp.Diff(want, marked); diff != "" {
		t.Errorf("marked lost (-want +got):\n%s", diff)
	}
	evs, err := s.ListEvents(ctx, store.EventFilter{Type: "sandbox.lost"})
	if err != nil || len(evs) != len(want) {
		t.Errorf("%d sandbox.lost events (%v), want %d", len(evs), err, len(want))
	}
	if sb, _ := s.GetSandbox(ctx, "sb_b20"); sb.State != "stopped" {
		t.Errorf("stopped sandbox now %s", sb.State)
	}
	// A node that beats again is not lost any more.
	if err := s.HeartbeatNode(ctx, "node_c", past); err != nil {
		t.Fatal(err)
	}
	sb := sandbox("sb_c1", "ws_c1")
	sb.Node = "node_c"
	if err := s.CreateSandbox(ctx, sb); err != nil {
		t.Fatal(err)
	}
	if got, err := s.MarkNodeLost(ctx, "node_c", past, "node node_a"); err != nil || len(got) != 0 {
		t.Errorf("MarkNodeLost of a live node = %v, %v", got, err)
	}

	// Adoption: only the plain copy workspaces of the lost shared node,
	// each by one adopter; two adopting at once, one at a time, take one
	// each, and the next pass takes the last.
	var mu2 sync.Mutex
	var adopted []string
	adopt := func(to string, limit int) {
		got, err := s.AdoptWorkspaces(ctx, "node_b", to, past, limit)
		if err != nil {
			t.Error(err)
		}
		mu2.Lock()
		defer mu2.Unlock()
		for _, w := range got {
			if w.Node != to {
				t.Errorf("adopted %s reported owned by %s, want %s", w.ID, w.Node, to)
			}
			adopted = append(adopted, w.ID)
		}
		if len(got) > limit && limit > 0 {
			t.Errorf("adopted %d workspaces with a limit of %d", len(got), limit)
		}
	}
	wg.Go(func() { adopt("node_a", 1) })
	wg.Go(func() { adopt("node_c", 1) })
	wg.Wait()
	if len(adopted) != 2 {
		t.Errorf("two adopters with a limit of 1 took %v", adopted)
	}
	adopt("node_a", 0)
	adopt("node_c", 0)
	slices.Sort(adopted)
	if diff := cmp.Diff([]string{"ws_b1", "ws_b4", "ws_b5"}, adopted); diff != "" {
		t.Errorf("adopted (-want +got):\n%s", diff)
	}
	if w, _ := s.GetWorkspace(ctx, "ws_b2"); w.Node != "node_b" {
		t.Errorf("workspace with a quota moved to %s", w.Node)
	}
	// node_c is not shared: lost or not, nobody adopts its workspaces.
	if got, err := s.AdoptWorkspaces(ctx, "node_c", "node_a", past.Add(time.Hour), 0); err != nil || len(got) != 0 {
		t.Errorf("AdoptWorkspaces of an unshared node = %v, %v", got, err)
	}
	// An update of the workspace by its old owner does not take it back.
	w, _ := s.GetWorkspace(ctx, "ws_b1")
	w.Node = "node_b"
	w.Dirty = true
	if err := s.UpdateWorkspace(ctx, w); err != nil {
		t.Fatal(err)
	}
	if w, _ := s.GetWorkspace(ctx, "ws_b1"); w.Node == "node_b" {
		t.Errorf("UpdateWorkspace moved the workspace back to node_b")
	}

	// The store's clock is a clock (the server is on this machine).
	if c, err := s.Clock(ctx); err != nil || c.Sub(time.Now()).Abs() > time.Minute || c.Location() != time.UTC {
		t.Errorf("Clock = %v, %v; want about now, in UTC", c, err)
	}

	// The first value stored wins.
	v1, err := s.ClusterValue(ctx, "k", "first")
	if err != nil {
		t.Fatal(err)
	}
	v2, err := s.ClusterValue(ctx, "k", "second")
	if err != nil || v1 != "first" || v2 != "first" {
		t.Errorf("ClusterValue = %q, %q (%v), want first twice", v1, v2, err)
	}
}
