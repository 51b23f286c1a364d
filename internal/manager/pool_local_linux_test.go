package manager

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/agentbox/agentbox/internal/backend/local"
	"github.com/agentbox/agentbox/internal/image"
	"github.com/agentbox/agentbox/internal/mountinfo"
	"github.com/agentbox/agentbox/internal/policy"
	"github.com/agentbox/agentbox/internal/sandbox"
	"github.com/agentbox/agentbox/internal/testutil"
	"github.com/agentbox/agentbox/internal/testutil/skip"
	"github.com/agentbox/agentbox/internal/workspace"
)

// TestWarmPoolLocal: a warm pool of the local backend is filled with
// jails, and a sandbox creation of its class takes one: the sandbox sees
// exactly its workspace at /workspace, read-write, nosuid, nodev, and what
// it writes reaches the host; the pool is refilled with a new jail;
// StopPool removes the unclaimed one and the claimed one goes with its
// sandbox, each leaving no mount behind.
func TestWarmPoolLocal(t *testing.T) {
	requireDriver(t, workspace.Overlay)
	ctx := t.Context()
	imagesDir := filepath.Join(t.TempDir(), "images")
	if _, err := image.Build(ctx, image.BuildOptions{Kind: image.KindBusybox, RootfsDir: filepath.Join(imagesDir, "busybox", "rootfs"), NoEngine: true}); err != nil {
		t.Fatalf("building the busybox root file system: %v", err)
	}
	gb := guestBinary(t)
	h := &harness{t: t, driver: workspace.Overlay, data: t.TempDir(), home: t.TempDir()}
	lb, err := local.New(local.Options{StateDir: filepath.Join(h.data, "local"), ImagesDir: imagesDir})
	if err != nil {
		skip.OrFail(t, fmt.Sprintf("the local backend is unavailable: %v", err))
	}
	t.Cleanup(func() { lb.Close() })
	rec := &poolRecorder{}
	h.configure = func(c *Config) {
		c.Backends = map[string]sandbox.Backend{local.Name: lb}
		c.DefaultBackend, c.DefaultImage, c.GuestBinary = local.Name, "busybox", gb
		c.Observer = rec
		c.WarmPool = []PoolSpec{{Backend: local.Name, Image: "busybox", Size: 1}}
	}
	h.open()
	t.Cleanup(h.cleanup)
	t.Cleanup(func() {
		if h.m != nil {
			h.m.StopPool(context.Background())
		}
	})
	h.src = testutil.NewRepo(t, v1Files)
	r, _, err := h.m.AddRepo(ctx, h.src.Dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	h.repo = r
	owner := h.m.PoolOwner()
	// mountsOf lists the mount points of the daemon's namespace that name
	// a sandbox.
	mountsOf := func(id string) []string {
		t.Helper()
		mps, err := mountinfo.Points()
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, mp := range mps {
			if strings.Contains(mp, id) {
				out = append(out, mp)
			}
		}
		return out
	}

	pooled := waitReady(t, h, 1)
	if len(mountsOf(pooled[0])) == 0 {
		t.Errorf("pooled jail %s has no pool point mounted", pooled[0])
	}
	w := h.create(CreateRequest{Repo: h.repo.ID})
	h.writeFile(w.ID, "only-local.txt", "local\n")
	spec := sandbox.Spec{Policy: &policy.Policy{Network: policy.Network{Mode: policy.ModeNone}, Env: map[string]string{"TASK": "local"}}}
	sb, err := h.m.CreateSandbox(ctx, w.ID, spec)
	if err != nil {
		t.Fatal(err)
	}
	if sb.ID != pooled[0] || sb.Backend != local.Name {
		t.Fatalf("sandbox %s on %s, want the pooled local jail %s", sb.ID, sb.Backend, pooled[0])
	}
	if got := warmDetail(t, h, w.ID, sb.ID); got != "hit" {
		t.Errorf("sandbox.created warm_pool = %q, want hit", got)
	}

	want := dirNames(t, h.files(w))
	slices.Sort(want)
	res, out, _ := h.exec(w.ID, "sh", "-c", workspaceView+"; echo inside > /workspace/made-inside.txt")
	if res.ExitCode != 0 || res.Replaced || res.SandboxID != sb.ID {
		t.Fatalf("exec = %+v %q", res, out)
	}
	head, mounts, _ := strings.Cut(out, "---\n")
	if wantHead := "task=[local]\n1000\n" + strings.Join(want, "\n") + "\n"; head != wantHead {
		t.Errorf("sandbox sees\n%s\nwant\n%s", head, wantHead)
	}
	lines := strings.Split(strings.TrimSpace(mounts), "\n")
	top := strings.Fields(lines[len(lines)-1])
	if len(lines) != 2 || len(top) < 7 || !strings.HasPrefix(top[5], "rw,") || !strings.Contains(top[5], "nosuid") || !strings.Contains(top[5], "nodev") || !strings.HasPrefix(top[6], "master:") {
		t.Errorf("/workspace mounts inside:\n%s\nwant the pool point under the workspace, rw,nosuid,nodev and a slave", mounts)
	}
	if got, ok := h.readFile(w.ID, "made-inside.txt"); !ok || got != "inside\n" {
		t.Errorf("file written inside = %q, %v", got, ok)
	}

	// Refilled with a new jail; then StopPool removes it, mounts and all.
	again := waitReady(t, h, 1)
	if again[0] == sb.ID {
		t.Fatalf("the refilled pool holds the claimed %s", sb.ID)
	}
	if st := h.m.PoolStatus()[0]; st.Hits != 1 || st.Misses != 0 {
		t.Errorf("pool status = %+v, want 1 hit", st)
	}
	if err := h.m.StopPool(ctx); err != nil {
		t.Fatalf("StopPool: %v", err)
	}
	left, err := lb.List(ctx, map[string]string{sandbox.LabelPool: "1", sandbox.LabelPoolOwner: owner})
	if err != nil {
		t.Fatal(err)
	}
	if len(left) != 1 || left[0].ID != sb.ID {
		t.Errorf("pooled jails after StopPool: %+v, want only the claimed %s", left, sb.ID)
	}
	if m := mountsOf(again[0]); len(m) != 0 {
		t.Errorf("mounts of the unclaimed jail %s left: %v", again[0], m)
	}
	if err := h.m.RemoveSandbox(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	if m := mountsOf(sb.ID); len(m) != 0 {
		t.Errorf("mounts of the claimed jail %s left after its removal: %v", sb.ID, m)
	}
	if _, err := lb.Inspect(ctx, sb.ID); err == nil {
		t.Errorf("the claimed jail %s is still recorded after its removal", sb.ID)
	}
}
