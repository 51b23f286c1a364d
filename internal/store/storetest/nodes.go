package storetest

import (
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
