package manager

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/agentbox/agentbox/internal/backend/local"
	"github.com/agentbox/agentbox/internal/errdefs"
	"github.com/agentbox/agentbox/internal/image"
	"github.com/agentbox/agentbox/internal/sandbox"
	"github.com/agentbox/agentbox/internal/sandbox/backendtest"
	"github.com/agentbox/agentbox/internal/store"
	"github.com/agentbox/agentbox/internal/testutil"
	"github.com/agentbox/agentbox/internal/workspace"
)

// gcKey names an item as the tests compare them: "tier/kind/id".
func gcKey(it GCItem) string { return fmt.Sprintf("%d/%s/%s", it.Tier, it.Kind, it.ID) }

func gcKeys(rep GCReport) []string {
	out := []string{}
	for _, it := range rep.Items {
		out = append(out, gcKey(it))
	}
	return out
}

// gcState is what a dry run must leave exactly as it was.
type gcState struct {
	Repos, Pristines, Workspaces, Sandboxes []string
	Dirs                                    map[string][]string
	Mounts                                  int
}

func (h *harness) gcState() gcState {
	h.t.Helper()
	ctx := context.Background()
	s := gcState{Dirs: map[string][]string{}}
	repos, _ := h.st.ListRepos(ctx)
	for _, r := range repos {
		s.Repos = append(s.Repos, r.ID)
	}
	pcs, _ := h.st.ListPristines(ctx, "")
	for _, p := range pcs {
		s.Pristines = append(s.Pristines, p.ID)
	}
	wss, _ := h.st.ListWorkspaces(ctx, "")
	for _, w := range wss {
		s.Workspaces = append(s.Workspaces, w.ID+":"+w.State)
	}
	sbs, _ := h.st.ListSandboxes(ctx, store.SandboxFilter{})
	for _, sb := range sbs {
		s.Sandboxes = append(s.Sandboxes, sb.ID+":"+sb.State)
	}
	for _, d := range []string{"repos", "pristine", "workspaces", "sandboxes"} {
		s.Dirs[d] = dirNames(h.t, filepath.Join(h.data, d))
	}
	s.Mounts = len(mountsUnder(h.t, h.data))
	return s
}

func (h *harness) gc(req GCRequest, now time.Time) GCReport {
	h.t.Helper()
	rep, err := h.m.GC(h.t.Context(), req, now)
	if err != nil {
		h.t.Fatalf("GC(%+v): %v", req, err)
	}
	return rep
}

// gcEvents are the gc.removed events, as their details.
func (h *harness) gcEvents() []map[string]any {
	h.t.Helper()
	evs, err := h.m.Events(context.Background(), store.EventFilter{Type: "gc.removed"})
	if err != nil {
		h.t.Fatal(err)
	}
	var out []map[string]any
	for _, e := range evs {
		var d map[string]any
		if err := json.Unmarshal([]byte(e.Detail), &d); err != nil {
			h.t.Fatal(err)
		}
		if e.Actor != "gc" {
			h.t.Errorf("gc.removed event by %q", e.Actor)
		}
		out = append(out, d)
	}
	return out
}

// pristineOf is the pristine checkout a workspace stacks on.
func (h *harness) pristineOf(w store.Workspace) store.Pristine {
	h.t.Helper()
	p, err := h.st.GetPristine(context.Background(), w.PristineID)
	if err != nil {
		h.t.Fatal(err)
	}
	return p
}

// addRepo caches one more source repository, last used at the given time.
func (h *harness) addRepo(lastUsed time.Time) store.Repo {
	h.t.Helper()
	// Incompressible, so that each repo takes room that removing it frees.
	big := make([]byte, 512<<10)
	rand.Read(big)
	src := testutil.NewRepo(h.t, map[string]string{"f.txt": "x\n", "big.bin": string(big)})
	// A file:// URL clones through git's transport: a plain path would
	// hard-link the source's objects, and removing the mirror would free
	// none of them.
	r, _, err := h.m.AddRepo(h.t.Context(), "file://"+src.Dir, nil)
	if err != nil {
		h.t.Fatal(err)
	}
	h.setLastUsed(r.ID, lastUsed)
	r.LastUsedAt = lastUsed
	return r
}

func (h *harness) setLastUsed(repoID string, at time.Time) {
	h.t.Helper()
	r, err := h.st.GetRepo(context.Background(), repoID)
	if err != nil {
		h.t.Fatal(err)
	}
	r.LastUsedAt = at
	if err := h.st.UpdateRepo(context.Background(), r); err != nil {
		h.t.Fatal(err)
	}
}

// gcObserver counts the collector's removals as the metrics do.
type gcObserver struct{ removed map[string]int }

func (o *gcObserver) ObserveCreate(string, time.Duration, error) {}
func (o *gcObserver) ObserveExec(string, time.Duration, string)  {}
func (o *gcObserver) ObserveGCRemoval(kind string)               { o.removed[kind]++ }

// TestGCTiers sets up, for each tier, objects that may go and objects
// that must stay, then collects with a one-byte budget: the dry run lists
// exactly what may go, in tier order, and changes nothing; the real run
// removes the same, records an event and a metric for each, and leaves
// the rest working.
func TestGCTiers(t *testing.T) {
	type tc struct {
		name string
		// docker runs the case on a harness with the docker backend.
		docker bool
		// retention and idle configure the manager.
		retention, idle time.Duration
		// setup returns the keys the collector must list, in order, and
		// a check of the state after the real run.
		setup func(h *harness, now time.Time) (want []string, after func())
	}
	cases := []tc{
		{
			name: "sandboxes", docker: true, idle: time.Minute,
			setup: func(h *harness, now time.Time) ([]string, func()) {
				ctx := t.Context()
				idleWS := h.create(CreateRequest{})
				res, _, _ := h.exec(idleWS.ID, "sh", "-c", "echo kept > /workspace/kept.txt")
				idleSB := res.SandboxID
				// A stopped sandbox whose run directory a crash left.
				leftWS := h.create(CreateRequest{})
				res, _, _ = h.exec(leftWS.ID, "true")
				leftSB := res.SandboxID
				if _, err := h.m.StopSandbox(ctx, leftSB); err != nil {
					t.Fatal(err)
				}
				leftDir := h.m.sandboxDir(leftSB)
				os.MkdirAll(leftDir, 0o700)
				os.WriteFile(filepath.Join(leftDir, "left.bin"), make([]byte, 128<<10), 0o600)
				// Idle by the clock, but running a command: not idle.
				busyWS := h.create(CreateRequest{})
				stop := runLong(t, h, busyWS.ID)
				t.Cleanup(func() { stop() })
				return []string{"1/sandbox/" + leftSB, "1/sandbox/" + idleSB}, func() {
					if _, err := os.Stat(leftDir); !os.IsNotExist(err) {
						t.Errorf("left-over run directory: %v", err)
					}
					if sb, _ := h.m.GetSandbox(ctx, idleSB); sb.State != string(sandbox.StateStopped) {
						t.Errorf("idle sandbox %s is %s, want stopped", idleSB, sb.State)
					}
					res, out, _ := h.exec(idleWS.ID, "cat", "/workspace/kept.txt")
					if !res.Replaced || out != "kept\n" {
						t.Errorf("exec after collection: %+v %q", res, out)
					}
					if sbs, _ := h.m.ListSandboxes(ctx, busyWS.ID); len(sbs) != 1 || sbs[0].State != string(sandbox.StateRunning) {
						t.Errorf("the busy sandbox: %+v", sbs)
					}
				}
			},
		},
		{
			name: "pristine",
			setup: func(h *harness, now time.Time) ([]string, func()) {
				old := h.create(CreateRequest{Ref: "v1"})
				kept := h.create(CreateRequest{})
				unused := h.pristineOf(old)
				used := h.pristineOf(kept)
				if err := h.m.RemoveWorkspace(t.Context(), old.ID); err != nil {
					t.Fatal(err)
				}
				return []string{"2/pristine/" + unused.ID}, func() {
					if _, err := os.Stat(unused.Path); !os.IsNotExist(err) {
						t.Errorf("unused pristine checkout still on disk: %v", err)
					}
					if _, err := h.st.GetPristine(t.Context(), unused.ID); !errors.Is(err, errdefs.ErrNotFound) {
						t.Errorf("unused pristine row: %v", err)
					}
					if _, err := os.Stat(used.Path); err != nil {
						t.Errorf("used pristine checkout: %v", err)
					}
					h.writeFile(kept.ID, "new.txt", "x")
					if st := h.status(kept.ID); !st.Dirty {
						t.Errorf("workspace on the kept checkout: %+v", st)
					}
					// A workspace at the collected commit gets a new checkout.
					again := h.create(CreateRequest{Ref: "v1"})
					if got, ok := h.readFile(again.ID, "keep/old.txt"); !ok || got != "old\n" {
						t.Errorf("workspace at v1 after collection: %q %v", got, ok)
					}
				}
			},
		},
		{
			name: "repos",
			setup: func(h *harness, now time.Time) ([]string, func()) {
				h.setLastUsed(h.repo.ID, now.Add(-time.Hour))
				r2 := h.addRepo(now.Add(-3 * time.Hour))
				r3 := h.addRepo(now.Add(-2 * time.Hour))
				busy := h.addRepo(now.Add(-4 * time.Hour))
				w := h.create(CreateRequest{Repo: busy.ID})
				h.setLastUsed(busy.ID, now.Add(-4*time.Hour))
				return []string{"3/repo/" + r2.ID, "3/repo/" + r3.ID, "3/repo/" + h.repo.ID}, func() {
					for _, r := range []store.Repo{r2, r3, h.repo} {
						if _, err := os.Stat(r.Path); !os.IsNotExist(err) {
							t.Errorf("repo %s still on disk: %v", r.ID, err)
						}
					}
					if _, err := os.Stat(busy.Path); err != nil {
						t.Errorf("repo in use: %v", err)
					}
					if st := h.status(w.ID); st.Dirty {
						t.Errorf("workspace on the kept repo: %+v", st)
					}
				}
			},
		},
		{
			name: "workspaces", retention: time.Hour,
			setup: func(h *harness, now time.Time) ([]string, func()) {
				clean := h.create(CreateRequest{})
				dirty := h.create(CreateRequest{})
				h.writeFile(dirty.ID, "work.txt", "unsaved\n")
				committed := h.create(CreateRequest{})
				h.writeFile(committed.ID, "done.txt", "saved\n")
				if _, err := h.m.Commit(t.Context(), committed.ID, "done", nil); err != nil {
					t.Fatal(err)
				}
				// Clean again, but with a branch of its own holding a commit.
				branched := h.create(CreateRequest{})
				h.writeFile(branched.ID, "b.txt", "b\n")
				h.agentGit(h.files(branched), "checkout", "-q", "-b", "side")
				h.agentGit(h.files(branched), "add", "b.txt")
				h.agentGit(h.files(branched), "commit", "-q", "-m", "side")
				h.agentGit(h.files(branched), "checkout", "-q", "agentbox/"+branched.ID)
				return []string{"4/workspace/" + clean.ID}, func() {
					if _, err := h.m.GetWorkspace(t.Context(), clean.ID); !errors.Is(err, errdefs.ErrNotFound) {
						t.Errorf("clean workspace: %v", err)
					}
					if _, err := os.Stat(clean.Dir); !os.IsNotExist(err) {
						t.Errorf("clean workspace dir: %v", err)
					}
					if got, ok := h.readFile(dirty.ID, "work.txt"); !ok || got != "unsaved\n" {
						t.Errorf("dirty workspace lost its change: %q %v", got, ok)
					}
					if got, ok := h.readFile(committed.ID, "done.txt"); !ok || got != "saved\n" {
						t.Errorf("committed workspace lost its commit: %q %v", got, ok)
					}
					if _, err := h.m.GetWorkspace(t.Context(), branched.ID); err != nil {
						t.Errorf("workspace with a side branch: %v", err)
					}
				}
			},
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var h *harness
			if c.docker {
				h, _ = sandboxHarness(t)
			} else {
				h = newHarness(t, workspace.Overlay)
			}
			obs := &gcObserver{removed: map[string]int{}}
			base := h.configure
			h.configure = func(cfg *Config) {
				if base != nil {
					base(cfg)
				}
				cfg.IdleTimeout, cfg.WorkspaceRetention, cfg.Observer = c.idle, c.retention, obs
			}
			h.reopen()
			now := time.Now().Add(2 * time.Hour)
			want, after := c.setup(h, now)

			before := h.gcState()
			dry := h.gc(GCRequest{DryRun: true, Budget: 1}, now)
			if d := cmp.Diff(want, gcKeys(dry)); d != "" {
				t.Errorf("dry run items (-want +got):\n%s", d)
			}
			for _, it := range dry.Items {
				if it.Removed || it.Reason == "" || it.Bytes < 0 {
					t.Errorf("dry run item %+v", it)
				}
			}
			if dry.UsageBytes <= 0 || dry.UnderBudget || !dry.DryRun {
				t.Errorf("dry run report %+v", dry)
			}
			if d := cmp.Diff(before, h.gcState()); d != "" {
				t.Errorf("the dry run changed the state (-before +after):\n%s", d)
			}
			if evs := h.gcEvents(); len(evs) != 0 {
				t.Errorf("the dry run recorded %d gc.removed events", len(evs))
			}

			rep := h.gc(GCRequest{Budget: 1}, now)
			if d := cmp.Diff(want, gcKeys(rep)); d != "" {
				t.Errorf("items (-want +got):\n%s", d)
			}
			kinds := map[string]int{}
			for _, it := range rep.Items {
				if !it.Removed || it.Error != "" {
					t.Errorf("item %+v not removed", it)
				}
				kinds[it.Kind]++
			}
			evs := h.gcEvents()
			if len(evs) != len(want) {
				t.Errorf("%d gc.removed events, want %d", len(evs), len(want))
			}
			for i, e := range evs {
				if i < len(rep.Items) && (e["id"] != rep.Items[i].ID || e["kind"] != rep.Items[i].Kind || e["reason"] != rep.Items[i].Reason || e["bytes"] != float64(rep.Items[i].Bytes)) {
					t.Errorf("event %d %v, item %+v", i, e, rep.Items[i])
				}
			}
			if d := cmp.Diff(kinds, obs.removed); d != "" && len(want) > 0 {
				t.Errorf("observed removals (-items +observed):\n%s", d)
			}
			after()
		})
	}
}

// TestGCStopsUnderBudget collects with a budget that the first repo's
// removal meets: only that one goes.
func TestGCStopsUnderBudget(t *testing.T) {
	h := newHarness(t, workspace.Overlay)
	now := time.Now()
	h.setLastUsed(h.repo.ID, now.Add(-time.Hour))
	oldest := h.addRepo(now.Add(-3 * time.Hour))
	next := h.addRepo(now.Add(-2 * time.Hour))

	dry := h.gc(GCRequest{DryRun: true, Budget: 1}, now)
	if d := cmp.Diff([]string{"3/repo/" + oldest.ID, "3/repo/" + next.ID, "3/repo/" + h.repo.ID}, gcKeys(dry)); d != "" {
		t.Fatalf("dry run (-want +got):\n%s", d)
	}
	// Room for what the removal itself writes (the database's log).
	budget := dry.UsageBytes - dry.Items[0].Bytes + dry.Items[0].Bytes/4
	if dry.Items[0].Bytes < 512<<10 || dry.Items[1].Bytes < 512<<10 {
		t.Fatalf("repos of 512 KiB of random data measured %d and %d bytes", dry.Items[0].Bytes, dry.Items[1].Bytes)
	}
	rep := h.gc(GCRequest{Budget: budget}, now)
	if d := cmp.Diff([]string{"3/repo/" + oldest.ID}, gcKeys(rep)); d != "" {
		t.Errorf("items (-want +got):\n%s", d)
	}
	if !rep.UnderBudget || rep.AfterBytes > budget {
		t.Errorf("report %+v: not under the budget %d", rep, budget)
	}
	if _, err := os.Stat(next.Path); err != nil {
		t.Errorf("the next repo went too: %v", err)
	}
	// Within the budget now: nothing more goes.
	if rep := h.gc(GCRequest{Budget: budget}, now); len(rep.Items) != 0 || !rep.UnderBudget {
		t.Errorf("second run under the budget: %+v", rep)
	}
	if evs := h.gcEvents(); len(evs) != 1 || evs[0]["id"] != oldest.ID || evs[0]["kind"] != GCRepo {
		t.Errorf("events %v", evs)
	}
}

// TestGCNoBudget refuses to run without a budget and changes nothing.
func TestGCNoBudget(t *testing.T) {
	h := newHarness(t, workspace.Overlay)
	before := h.gcState()
	if _, err := h.m.GC(t.Context(), GCRequest{}, time.Now()); !errors.Is(err, errdefs.ErrInvalid) {
		t.Errorf("GC without a budget: %v", err)
	}
	if d := cmp.Diff(before, h.gcState()); d != "" {
		t.Errorf("changed (-before +after):\n%s", d)
	}
	// A budget the data dir is within removes nothing.
	rep := h.gc(GCRequest{Budget: 1 << 40}, time.Now())
	if len(rep.Items) != 0 || !rep.UnderBudget || !slices.Equal(before.Repos, h.gcState().Repos) {
		t.Errorf("GC within the budget: %+v", rep)
	}
}

// TestGCUnpackedImages: every collection, whatever the budget, removes
// the local backend's unpacked images whose engine image is gone, reports
// them as tier 0, and keeps those whose image is still there.
func TestGCUnpackedImages(t *testing.T) {
	if err := exec.Command("docker", "image", "inspect", "agentbox/busybox:latest").Run(); err != nil {
		backendtest.SkipOrFail(t, "the engine's busybox image is missing: "+err.Error())
	}
	h := newHarness(t, workspace.Overlay)
	cache := t.TempDir()
	lb, err := local.New(local.Options{StateDir: filepath.Join(h.data, "local"), ImagesDir: filepath.Join(h.data, "images"), ImageCache: cache})
	if err != nil {
		backendtest.SkipOrFail(t, "the local backend is unavailable: "+err.Error())
	}
	t.Cleanup(func() { lb.Close() })
	obs := &gcObserver{removed: map[string]int{}}
	prev := h.configure
	h.configure = func(c *Config) {
		if prev != nil {
			prev(c)
		}
		c.Backends = map[string]sandbox.Backend{"local": lb}
		c.Observer = obs
	}
	h.reopen()

	name := fmt.Sprintf("agentbox-test/gc:%d", time.Now().UnixNano())
	build := exec.Command("docker", "build", "-q", "-t", name, "-")
	build.Stdin = strings.NewReader("FROM agentbox/busybox:latest\nLABEL gc=" + name + "\n")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("docker build: %v %s", err, out)
	}
	t.Cleanup(func() { exec.Command("docker", "rmi", "-f", name).Run() })
	gone, err := image.Unpack(t.Context(), name, cache)
	if err != nil {
		t.Fatal(err)
	}
	kept, err := image.Unpack(t.Context(), "agentbox/busybox:latest", cache)
	if err != nil {
		t.Fatal(err)
	}
	exec.Command("docker", "rmi", "-f", name).Run()

	rep := h.gc(GCRequest{Budget: 1 << 50}, time.Now())
	if d := cmp.Diff([]string{"0/image/" + gone.ID}, gcKeys(rep)); d != "" {
		t.Fatalf("items (-want +got):\n%s", d)
	}
	if it := rep.Items[0]; !it.Removed || it.Bytes <= 0 || !strings.Contains(it.Reason, "engine no longer has it") {
		t.Errorf("item %+v", it)
	}
	if _, err := os.Stat(gone.Rootfs); !os.IsNotExist(err) {
		t.Errorf("%s is still there: %v", gone.Rootfs, err)
	}
	if _, err := os.Stat(kept.Rootfs); err != nil {
		t.Errorf("%s went: %v", kept.Rootfs, err)
	}
	if obs.removed[GCImage] != 1 {
		t.Errorf("observed removals %v", obs.removed)
	}
	if evs := h.gcEvents(); len(evs) != 1 || evs[0]["kind"] != GCImage || evs[0]["id"] != gone.ID {
		t.Errorf("events %v", evs)
	}
	if rep := h.gc(GCRequest{Budget: 1 << 50}, time.Now()); len(rep.Items) != 0 {
		t.Errorf("second run: %+v", rep.Items)
	}
}
