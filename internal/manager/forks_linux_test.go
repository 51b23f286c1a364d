package manager

import (
	"errors"
	"sync/atomic"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/agentbox/agentbox/internal/apitypes"
	"github.com/agentbox/agentbox/internal/errdefs"
	"github.com/agentbox/agentbox/internal/workspace"
)

// TestForkWorkspaces: N forks at once, each a full copy on BRANCH-i; a bad
// count changes nothing; a failure of one removes the others (all or
// none).
func TestForkWorkspaces(t *testing.T) {
	h := newHarness(t, workspace.Overlay)
	ctx := t.Context()
	parent := h.create(CreateRequest{})
	h.writeFile(parent.ID, "p.txt", "p\n")
	ids := func() []string {
		wss, err := h.m.ListWorkspaces(ctx, ListFilter{})
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, w := range wss {
			out = append(out, w.ID)
		}
		return out
	}
	before := ids()
	for _, n := range []int{0, -1, apitypes.MaxForks + 1} {
		if _, err := h.m.ForkWorkspaces(ctx, parent.ID, apitypes.ForksRequest{Count: n}); !errors.Is(err, errdefs.ErrInvalid) {
			t.Errorf("count %d: %v, want ErrInvalid", n, err)
		}
	}
	if _, err := h.m.ForkWorkspaces(ctx, "ws_nope", apitypes.ForksRequest{Count: 2}); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("unknown parent: %v, want ErrNotFound", err)
	}

	// The second fork to get ready fails: none is left.
	var readies atomic.Int32
	h.m.failAt = func(step string) error {
		if step == "fork-ready" && readies.Add(1) == 2 {
			return errInjected
		}
		return nil
	}
	_, err := h.m.ForkWorkspaces(ctx, parent.ID, apitypes.ForksRequest{Count: 3})
	h.m.failAt = nil
	if !errors.Is(err, errInjected) {
		t.Fatalf("ForkWorkspaces with one failure = %v, want the injected error", err)
	}
	if diff := cmp.Diff(before, ids()); diff != "" {
		t.Errorf("workspaces after a failed ForkWorkspaces (-before +after):\n%s", diff)
	}

	forks, err := h.m.ForkWorkspaces(ctx, parent.ID, apitypes.ForksRequest{ForkRequest: ForkRequest{Branch: "try"}, Count: 3})
	if err != nil {
		t.Fatal(err)
	}
	if len(forks) != 3 {
		t.Fatalf("%d forks, want 3", len(forks))
	}
	for i, w := range forks {
		if want := "try-" + string(rune('1'+i)); w.Branch != want || w.ParentID != parent.ID {
			t.Errorf("fork %d: branch %q parent %q, want %q and %s", i, w.Branch, w.ParentID, want, parent.ID)
		}
		if got, ok := h.readFile(w.ID, "p.txt"); !ok || got != "p\n" {
			t.Errorf("fork %d: p.txt = %q, %v", i, got, ok)
		}
	}
	h.writeFile(forks[0].ID, "p.txt", "changed\n")
	if got, _ := h.readFile(forks[1].ID, "p.txt"); got != "p\n" {
		t.Errorf("a change in one fork shows in another: %q", got)
	}
}
