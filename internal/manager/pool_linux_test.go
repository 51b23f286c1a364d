package manager

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentbox/agentbox/internal/policy"
	"github.com/agentbox/agentbox/internal/sandbox"
	"github.com/agentbox/agentbox/internal/store"
)

// poolRecorder is an Observer and PoolObserver that keeps the pool's
// figures.
type poolRecorder struct {
	recorder
	pmu    sync.Mutex
	sizes  []int
	claims []bool
}

func (r *poolRecorder) ObservePoolSize(backend, image string, ready int) {
	r.pmu.Lock()
	defer r.pmu.Unlock()
	r.sizes = append(r.sizes, ready)
}

func (r *poolRecorder) ObservePoolClaim(backend, image string, hit bool) {
	r.pmu.Lock()
	defer r.pmu.Unlock()
	r.claims = append(r.claims, hit)
}

// poolHarness is a docker sandbox harness whose manager keeps a warm pool
// of size environments of the test image. At cleanup it stops the pool
// and checks that no environment of it, claimed or not, is left.
func poolHarness(t *testing.T, size int) (*harness, sandbox.Backend, *poolRecorder) {
	t.Helper()
	h, be := sandboxHarness(t)
	rec := &poolRecorder{}
	base := h.configure
	h.configure = func(c *Config) {
		base(c)
		c.Observer = rec
		c.WarmPool = []PoolSpec{{Backend: "docker", Image: testImage, Size: size}}
	}
	h.reopen()
	owner := h.m.PoolOwner()
	t.Cleanup(func() {
		// Runs before the harness removes the workspaces: claimed
		// environments are sandboxes, which its own check covers.
		left, err := be.List(context.Background(), map[string]string{sandbox.LabelPool: "1", sandbox.LabelPoolOwner: owner})
		if err != nil {
			t.Error(err)
		}
		for _, in := range left {
			if _, err := h.st.GetSandbox(context.Background(), in.ID); err == nil {
				continue
			}
			t.Errorf("pooled environment %s (%s) left after cleanup", in.ID, in.Ref)
			be.Remove(context.Background(), in.Ref)
		}
	})
	t.Cleanup(func() {
		if h.m != nil {
			if err := h.m.StopPool(context.Background()); err != nil {
				t.Errorf("StopPool: %v", err)
			}
		}
	})
	return h, be, rec
}

// waitReady waits until the pool holds n ready environments and returns
// their ids.
func waitReady(t *testing.T, h *harness, n int) []string {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		st := h.m.PoolStatus()
		if len(st) != 1 {
			t.Fatalf("pool status = %+v, want one pool", st)
		}
		if st[0].Disabled != "" {
			t.Fatalf("pool disabled: %s", st[0].Disabled)
		}
		if st[0].Ready == n {
			return readyIDs(h)
		}
		if time.Now().After(deadline) {
			t.Fatalf("pool has %d ready environments, want %d", st[0].Ready, n)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func readyIDs(h *harness) []string {
	h.m.pool.mu.Lock()
	defer h.m.pool.mu.Unlock()
	var out []string
	for _, e := range h.m.pool.classes[0].ready {
		out = append(out, e.id)
	}
	return out
}

// warmDetail is the warm_pool detail of a sandbox's creation event.
func warmDetail(t *testing.T, h *harness, wsID, sbID string) string {
	t.Helper()
	for _, ev := range h.events(wsID, "sandbox.created") {
		if ev.SandboxID != sbID {
			continue
		}
		var d map[string]any
		if err := json.Unmarshal([]byte(ev.Detail), &d); err != nil {
			t.Fatal(err)
		}
		s, _ := d["warm_pool"].(string)
		return s
	}
	t.Fatalf("no sandbox.created event for %s", sbID)
	return ""
}

// workspaceView lists /workspace, the environment and the mounts at
// /workspace as a command in the sandbox sees them.
const workspaceView = `echo "task=[$TASK]"; id -u; ls -A /workspace | sort; echo ---; grep ' /workspace ' /proc/self/mountinfo`

func TestWarmPoolClaim(t *testing.T) {
	h, _, rec := poolHarness(t, 2)
	ctx := t.Context()
	pooled := waitReady(t, h, 2)

	// Two workspaces claimed in turn, each with its own file and env.
	type task struct {
		w   store.Workspace
		env string
	}
	var tasks []task
	for _, name := range []string{"one", "two"} {
		w := h.create(CreateRequest{Repo: h.repo.ID})
		h.writeFile(w.ID, "only-"+name+".txt", name+"\n")
		spec := sandbox.Spec{Policy: &policy.Policy{Network: policy.Network{Mode: policy.ModeNone}, Env: map[string]string{"TASK": name}}}
		sb, err := h.m.CreateSandbox(ctx, w.ID, spec)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Contains(pooled, sb.ID) {
			t.Fatalf("sandbox %s of %s is not one of the pooled %v", sb.ID, name, pooled)
		}
		if got := warmDetail(t, h, w.ID, sb.ID); got != "hit" {
			t.Errorf("sandbox.created warm_pool = %q, want hit", got)
		}
		tasks = append(tasks, task{w, name})
	}
	for _, tk := range tasks {
		var want []string
		for _, n := range dirNames(t, h.files(tk.w)) {
			want = append(want, n)
		}
		slices.Sort(want)
		res, out, _ := h.exec(tk.w.ID, "sh", "-c", workspaceView+"; echo inside-"+tk.env+" > /workspace/made-inside.txt")
		if res.ExitCode != 0 || res.Replaced {
			t.Fatalf("%s: exec = %+v %q", tk.env, res, out)
		}
		head, mounts, _ := strings.Cut(out, "---\n")
		// Exactly the workspace's own files, its own env, as the sandbox user.
		wantHead := "task=[" + tk.env + "]\n1000\n" + strings.Join(want, "\n") + "\n"
		if head != wantHead {
			t.Errorf("%s: sandbox sees\n%s\nwant\n%s", tk.env, head, wantHead)
		}
		// The top mount at /workspace (the last line) is the workspace,
		// nosuid,nodev.
		lines := strings.Split(strings.TrimSpace(mounts), "\n")
		top := strings.Fields(lines[len(lines)-1])
		if len(top) < 6 || !strings.Contains(top[5], "nosuid") || !strings.Contains(top[5], "nodev") || !strings.HasPrefix(top[5], "rw") {
			t.Errorf("%s: /workspace mount is %q, want rw,nosuid,nodev", tk.env, lines[len(lines)-1])
		}
		for _, other := range tasks {
			if other.w.ID != tk.w.ID && strings.Contains(out, other.w.ID) {
				t.Errorf("%s: sandbox sees the other workspace %s: %q", tk.env, other.w.ID, out)
			}
		}
		// Written by the sandbox user, read back on the host.
		if got, ok := h.readFile(tk.w.ID, "made-inside.txt"); !ok || got != "inside-"+tk.env+"\n" {
			t.Errorf("%s: file written inside = %q, %v", tk.env, got, ok)
		}
	}

	// Refilled in the background with new environments.
	again := waitReady(t, h, 2)
	for _, id := range again {
		if slices.Contains(pooled, id) {
			t.Errorf("refilled pool holds %s, which was claimed", id)
		}
	}
	st := h.m.PoolStatus()[0]
	if st.Hits != 2 || st.Misses != 0 {
		t.Errorf("pool status = %+v, want 2 hits", st)
	}
	rec.pmu.Lock()
	if !slices.Equal(rec.claims, []bool{true, true}) || len(rec.sizes) == 0 || rec.sizes[len(rec.sizes)-1] != 2 {
		t.Errorf("observed claims %v sizes %v", rec.claims, rec.sizes)
	}
	rec.pmu.Unlock()

	// Used once: a stopped claimed sandbox is gone, not back in the pool,
	// and the next exec replaces it (from the pool).
	first, _ := h.m.ListSandboxes(ctx, tasks[0].w.ID)
	if _, err := h.m.StopSandbox(ctx, first[0].ID); err != nil {
		t.Fatal(err)
	}
	if slices.Contains(readyIDs(h), first[0].ID) {
		t.Errorf("stopped sandbox %s went back to the pool", first[0].ID)
	}
	res, out, _ := h.exec(tasks[0].w.ID, "cat", "/workspace/made-inside.txt")
	if !res.Replaced || out != "inside-one\n" || !slices.Contains(again, res.SandboxID) {
		t.Errorf("exec after stop = %+v %q, want a replacement from the pool %v", res, out, again)
	}
}

func TestWarmPoolFallsBackToCold(t *testing.T) {
	h, be, _ := poolHarness(t, 1)
	ctx := t.Context()
	failed := waitReady(t, h, 1)[0]

	// A claim that fails half-way starts cold, and the environment it
	// took, which may have seen the workspace, is destroyed, not reused.
	h.m.failAt = func(step string) error {
		if step == "pool-record" {
			return errors.New("injected")
		}
		return nil
	}
	w0 := h.create(CreateRequest{Repo: h.repo.ID})
	res, out, _ := h.exec(w0.ID, "cat", "/workspace/README.md")
	h.m.failAt = nil
	if res.ExitCode != 0 || out != "hello\nworld\n" || res.SandboxID == failed {
		t.Fatalf("exec after a failed claim = %+v %q", res, out)
	}
	waitEvent(t, h, failed, "pool.discarded")
	if left, _ := be.List(ctx, map[string]string{sandbox.LabelSandbox: failed}); len(left) != 0 {
		t.Errorf("environment of the failed claim %s not removed: %+v", failed, left)
	}
	pooled := waitReady(t, h, 1)

	// Another class (other limits, or egress wired in at the start) never
	// takes a pooled environment.
	w := h.create(CreateRequest{Repo: h.repo.ID})
	sb, err := h.m.CreateSandbox(ctx, w.ID, sandbox.Spec{Policy: &policy.Policy{Network: policy.Network{Mode: policy.ModeNone}, Limits: policy.Limits{Memory: 256 << 20}}})
	if err != nil {
		t.Fatal(err)
	}
	if sb.ID == pooled[0] || warmDetail(t, h, w.ID, sb.ID) != "" {
		t.Errorf("sandbox %s of another class came from the pool", sb.ID)
	}
	if got := readyIDs(h); !slices.Equal(got, pooled) {
		t.Errorf("pool = %v after another class's create, want %v", got, pooled)
	}

	// An empty pool (stopped: never refilled) falls back to a cold start.
	if err := h.m.StopPool(ctx); err != nil {
		t.Fatal(err)
	}
	w2 := h.create(CreateRequest{Repo: h.repo.ID})
	res, out, _ = h.exec(w2.ID, "sh", "-c", "ls /workspace/README.md")
	if res.ExitCode != 0 || out != "/workspace/README.md\n" || res.SandboxID == pooled[0] {
		t.Fatalf("exec on an empty pool = %+v %q", res, out)
	}
	if got := warmDetail(t, h, w2.ID, res.SandboxID); got != "miss" {
		t.Errorf("sandbox.created warm_pool = %q, want miss", got)
	}
	if st := h.m.PoolStatus()[0]; st.Misses != 2 || st.Hits != 0 || st.Ready != 0 {
		t.Errorf("pool status = %+v, want two misses (the failed claim, the empty pool)", st)
	}
}

func TestWarmPoolSkipsDeadEnvironment(t *testing.T) {
	h, be, _ := poolHarness(t, 1)
	ctx := t.Context()
	dead := waitReady(t, h, 1)[0]
	envs, err := be.List(ctx, map[string]string{sandbox.LabelSandbox: dead})
	if err != nil || len(envs) != 1 {
		t.Fatalf("pooled environment %s: %v, %v", dead, envs, err)
	}
	if out, err := exec.Command("docker", "kill", envs[0].Ref).CombinedOutput(); err != nil {
		t.Fatalf("docker kill: %v: %s", err, out)
	}
	// Claimed at once, before or after the pool noticed: never the dead one.
	w := h.create(CreateRequest{Repo: h.repo.ID})
	res, out, _ := h.exec(w.ID, "cat", "/workspace/README.md")
	if res.ExitCode != 0 || out != "hello\nworld\n" || res.SandboxID == dead {
		t.Fatalf("exec after the pooled environment died = %+v %q", res, out)
	}
	// It is discarded, said so, and replaced.
	waitEvent(t, h, dead, "pool.discarded")
	if ids := waitReady(t, h, 1); ids[0] == dead {
		t.Errorf("pool still holds the dead %s", dead)
	}
	if left, _ := be.List(ctx, map[string]string{sandbox.LabelSandbox: dead}); len(left) != 0 {
		t.Errorf("dead pooled environment %s not removed: %+v", dead, left)
	}
}

// waitEvent waits for one event of type typ about sandbox id.
func waitEvent(t *testing.T, h *harness, id, typ string) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		evs, err := h.m.Events(t.Context(), store.EventFilter{SandboxID: id, Type: typ})
		if err != nil {
			t.Fatal(err)
		}
		if len(evs) == 1 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d %s events for %s, want 1", len(evs), typ, id)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestWarmPoolLeftoversRemovedAtStart(t *testing.T) {
	h, be, _ := poolHarness(t, 2)
	ctx := t.Context()
	waitReady(t, h, 2)
	owner := h.m.PoolOwner()
	// A crash: the pool stops filling, and nothing is removed.
	h.m.pool.cancel()
	h.m.pool.wg.Wait()
	if left, _ := be.List(ctx, map[string]string{sandbox.LabelPool: "1", sandbox.LabelPoolOwner: owner}); len(left) != 2 {
		t.Fatalf("before restart: %d pooled environments, want 2", len(left))
	}
	// The next start, with no pool configured, removes them.
	base := h.configure
	h.configure = func(c *Config) {
		base(c)
		c.WarmPool = nil
	}
	h.reopen()
	if left, _ := be.List(ctx, map[string]string{sandbox.LabelPool: "1", sandbox.LabelPoolOwner: owner}); len(left) != 0 {
		t.Errorf("after restart: pooled environments %+v left", left)
	}
	if _, err := os.Stat(h.m.poolDir()); !os.IsNotExist(err) {
		t.Errorf("pool directory after restart: %v", err)
	}
	if m := mountsUnder(t, h.data); len(m) != 0 {
		t.Errorf("mounts left: %v", m)
	}
}

// The reconciler leaves a warm pool's environments (no sandbox row until
// claimed, labelled with this daemon's owner) to the pool.
func TestWarmPoolSurvivesReconcile(t *testing.T) {
	h, _, _ := poolHarness(t, 2)
	before := waitReady(t, h, 2)
	repairs, err := h.m.Reconcile(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range repairs {
		t.Errorf("reconcile repaired %+v in a daemon with a filled warm pool", r)
	}
	for _, id := range before {
		if !h.m.Pooled(id) {
			t.Errorf("pooled %s gone after reconcile", id)
		}
	}
	// Claimed, it is an ordinary sandbox the reconciler sees.
	w := h.create(CreateRequest{Repo: h.repo.ID})
	res, _, _ := h.exec(w.ID, "true")
	if !slices.Contains(before, res.SandboxID) {
		t.Fatalf("exec ran in %s, not a pooled environment %v", res.SandboxID, before)
	}
	h.m.dropLive(res.SandboxID) // its guest connection is gone
	if _, err := h.m.Reconcile(t.Context()); err != nil {
		t.Fatal(err)
	}
	if sb, _ := h.m.GetSandbox(t.Context(), res.SandboxID); sb.State != string(sandbox.StateLost) {
		t.Errorf("a claimed sandbox without its guest is %s after reconcile, want lost", sb.State)
	}
}

// A pool's limits are its policy class: a sandbox whose policy asks for
// them takes a pooled environment, one with the defaults starts cold.
func TestWarmPoolPolicyClass(t *testing.T) {
	h, _ := sandboxHarness(t)
	base := h.configure
	h.configure = func(c *Config) {
		base(c)
		c.WarmPool = []PoolSpec{{Backend: "docker", Image: testImage, Size: 1, Limits: sandbox.Limits{MemoryBytes: 256 << 20, Pids: 128}}}
	}
	h.reopen()
	t.Cleanup(func() {
		if h.m != nil {
			if err := h.m.StopPool(context.Background()); err != nil {
				t.Errorf("StopPool: %v", err)
			}
		}
	})
	ctx := t.Context()
	pooled := waitReady(t, h, 1)
	cold, err := h.m.CreateSandbox(ctx, h.create(CreateRequest{Repo: h.repo.ID}).ID, sandbox.Spec{})
	if err != nil {
		t.Fatal(err)
	}
	if slices.Contains(pooled, cold.ID) {
		t.Errorf("a sandbox with the default limits took the pool's environment of another class")
	}
	classed := sandbox.Spec{Policy: &policy.Policy{Limits: policy.Limits{Memory: 256 << 20, Pids: 128}}}
	hit, err := h.m.CreateSandbox(ctx, h.create(CreateRequest{Repo: h.repo.ID}).ID, classed)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(pooled, hit.ID) {
		t.Errorf("a sandbox whose policy asks for the pool's limits started cold (%s, pool had %v)", hit.ID, pooled)
	}
}
