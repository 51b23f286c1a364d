package manager

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/agentbox/agentbox/internal/apitypes"
	"github.com/agentbox/agentbox/internal/store"
)

// TestProcessKeepsSandboxBusy: a background process counts as activity
// for the idle timer for as long as it runs, after its call returned; the
// sandbox is idle again once it ends. Its exec record says how it ended.
func TestProcessKeepsSandboxBusy(t *testing.T) {
	h, _ := evictHarness(t, time.Minute, 0)
	ctx := t.Context()
	w := h.create(CreateRequest{Repo: h.repo.ID})
	p, err := h.m.StartProcess(ctx, w.ID, apitypes.ExecRequest{Argv: []string{"sleep", "1000"}})
	if err != nil {
		t.Fatal(err)
	}
	later := time.Now().Add(2 * time.Minute)
	if ev, err := h.m.Evict(ctx, later); err != nil || len(ev) != 0 {
		t.Fatalf("a sandbox running a background process was evicted as idle: %v %v", ev, err)
	}
	if _, err := h.m.SignalProcess(ctx, w.ID, p.ID, apitypes.ProcessSignal{Signal: "KILL"}); err != nil {
		t.Fatal(err)
	}
	end, err := h.m.WaitProcess(ctx, w.ID, p.ID, apitypes.ProcessWait{Timeout: "30s"})
	if err != nil || end.State != store.ExecKilled || end.Signal != 9 {
		t.Fatalf("after KILL: %+v %v", end, err)
	}
	x, err := h.st.GetExec(ctx, p.ID)
	if err != nil || x.State != store.ExecKilled || x.SandboxID != p.SandboxID {
		t.Errorf("the process's exec record: %+v %v", x, err)
	}
	if ev, err := h.m.Evict(ctx, later); err != nil || !slices.Equal(ev, []string{p.SandboxID}) {
		t.Errorf("Evict after the process ended = %v, %v; want %s", ev, err, p.SandboxID)
	}
}

// TestProcessEndsWithSandboxLifetime: a sandbox's maximum age ends it
// whatever runs in it; its processes end lost, naming it.
func TestProcessEndsWithSandboxLifetime(t *testing.T) {
	h, _ := evictHarness(t, 0, time.Minute)
	ctx := t.Context()
	w := h.create(CreateRequest{Repo: h.repo.ID})
	p, err := h.m.StartProcess(ctx, w.ID, apitypes.ExecRequest{Argv: []string{"sleep", "1000"}})
	if err != nil {
		t.Fatal(err)
	}
	if ev, err := h.m.Evict(ctx, time.Now().Add(2*time.Minute)); err != nil || !slices.Equal(ev, []string{p.SandboxID}) {
		t.Fatalf("Evict = %v, %v; want %s", ev, err, p.SandboxID)
	}
	end, err := h.m.WaitProcess(ctx, w.ID, p.ID, apitypes.ProcessWait{Timeout: "30s"})
	if err != nil || end.State != store.ExecLost || !strings.Contains(end.Reason, p.SandboxID+" was stopped") {
		t.Errorf("a process of an evicted sandbox: %+v %v", end, err)
	}
	if x, err := h.st.GetExec(ctx, p.ID); err != nil || x.State != store.ExecLost {
		t.Errorf("its exec record: %+v %v", x, err)
	}
}
