package manager

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/internal/backend/docker"
	"github.com/agentbox/agentbox/internal/backend/local"
	"github.com/agentbox/agentbox/internal/errdefs"
	"github.com/agentbox/agentbox/internal/ids"
	"github.com/agentbox/agentbox/internal/image"
	"github.com/agentbox/agentbox/internal/sandbox"
	"github.com/agentbox/agentbox/internal/store"
	"github.com/agentbox/agentbox/internal/testutil"
	"github.com/agentbox/agentbox/internal/testutil/skip"
	"github.com/agentbox/agentbox/internal/workspace"
)

// repairCounter is an Observer that also counts repairs.
type repairCounter struct {
	mu sync.Mutex
	n  map[string]int
}

func (c *repairCounter) ObserveCreate(string, time.Duration, error) {}
func (c *repairCounter) ObserveExec(string, time.Duration, string)  {}
func (c *repairCounter) ObserveRepair(kind string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.n[kind]++
}

func (c *repairCounter) get(kind string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n[kind]
}

// labelledContainer starts a plain container (no guest) carrying the
// agentbox labels of sandbox id of workspace wsID, made by the daemon
// owner, and removes it at the end of the test.
func labelledContainer(t *testing.T, owner, id, wsID string) string {
	t.Helper()
	args := []string{"run", "-d", "--network", "none", "--name", "agentbox-" + id,
		"--label", sandbox.LabelManaged + "=1", "--label", docker.LabelBackend + "=docker",
		"--label", sandbox.LabelSandbox + "=" + id, "--label", sandbox.LabelWorkspace + "=" + wsID,
		"--label", sandbox.LabelOwner + "=" + owner, testImage, "sleep", "600"}
	out, err := exec.Command("docker", args...).CombinedOutput()
	if err != nil {
		t.Fatalf("docker run: %v\n%s", err, out)
	}
	ref := strings.TrimSpace(string(out))
	t.Cleanup(func() { exec.Command("docker", "rm", "-f", ref).Run() })
	return ref
}

// containerExists says whether the engine still has container ref.
func containerExists(t *testing.T, ref string) bool {
	t.Helper()
	out, err := exec.Command("docker", "ps", "-aq", "--no-trunc", "--filter", "id="+ref).Output()
	if err != nil {
		t.Fatalf("docker ps: %v", err)
	}
	return strings.TrimSpace(string(out)) != ""
}

func exists(p string) bool {
	_, err := os.Lstat(p)
	return err == nil
}

// TestReconcile sets up each inconsistency for real (docker containers,
// mounts, directories, rows), runs one reconcile pass, and checks the
// repair, its event and its count, and that a second pass finds nothing.
func TestReconcile(t *testing.T) {
	h, _ := sandboxHarness(t)
	counter := &repairCounter{n: map[string]int{}}
	h.configure = func(c *Config) {
		be, err := docker.New(docker.Options{Name: docker.NameDocker, Runtime: docker.RuntimeRunc})
		if err != nil {
			t.Fatal(err)
		}
		c.Backends = map[string]sandbox.Backend{"docker": be}
		c.DefaultBackend, c.DefaultImage, c.GuestBinary = "docker", testImage, guestBinary(t)
		c.Observer = counter
	}
	h.reopen()
	owner := OwnerID(h.data)
	t.Cleanup(func() {
		out, _ := exec.Command("docker", "ps", "-aq", "--filter", "label="+sandbox.LabelOwner+"="+owner).Output()
		for _, ref := range strings.Fields(string(out)) {
			t.Errorf("container %s of this test left", ref)
			exec.Command("docker", "rm", "-f", ref).Run()
		}
	})
	ctx := t.Context()
	w := h.create(CreateRequest{Repo: h.repo.ID})
	fakeRow := func(t *testing.T, state sandbox.State) store.Sandbox {
		now := time.Now().UTC()
		sb := store.Sandbox{ID: ids.New("sb"), WorkspaceID: w.ID, Backend: "docker", Image: testImage, Spec: "{}",
			State: string(state), CreatedAt: now, UpdatedAt: now, LastActivityAt: now}
		if err := h.st.CreateSandbox(ctx, sb); err != nil {
			t.Fatal(err)
		}
		return sb
	}

	cases := []struct {
		name string
		kind string
		// also are the kinds of further repairs the inconsistency needs.
		also []string
		// setup makes the inconsistency and returns the repaired object as
		// the repair names it and a check of the state after the pass.
		setup func(t *testing.T) (object string, check func(t *testing.T))
	}{{
		name: "running sandbox whose container was removed",
		kind: RepairSandboxLost,
		setup: func(t *testing.T) (string, func(*testing.T)) {
			res, _, _ := h.sub(t).exec(w.ID, "true")
			sb, _ := h.m.GetSandbox(ctx, res.SandboxID)
			if out, err := exec.Command("docker", "rm", "-f", sb.BackendRef).CombinedOutput(); err != nil {
				t.Fatalf("docker rm: %v\n%s", err, out)
			}
			return sb.ID, func(t *testing.T) {
				got, _ := h.m.GetSandbox(ctx, sb.ID)
				if got.State != string(sandbox.StateLost) || exists(h.m.sandboxDir(sb.ID)) {
					t.Errorf("sandbox after the pass: %s, run dir left: %v", got.State, exists(h.m.sandboxDir(sb.ID)))
				}
				// The next exec heals and says so.
				res, out, _ := h.sub(t).exec(w.ID, "cat", "/workspace/README.md")
				if !res.Replaced || out != "hello\nworld\n" {
					t.Errorf("exec after the repair: replaced=%v out=%q", res.Replaced, out)
				}
			}
		},
	}, {
		name: "running sandbox whose guest was killed",
		kind: RepairSandboxLost,
		setup: func(t *testing.T) (string, func(*testing.T)) {
			res, _, _ := h.sub(t).exec(w.ID, "true")
			sb, _ := h.m.GetSandbox(ctx, res.SandboxID)
			if out, err := exec.Command("docker", "kill", sb.BackendRef).CombinedOutput(); err != nil {
				t.Fatalf("docker kill: %v\n%s", err, out)
			}
			return sb.ID, func(t *testing.T) {
				if containerExists(t, sb.BackendRef) {
					t.Errorf("the stopped container %s of the lost sandbox is left", sb.BackendRef)
				}
			}
		},
	}, {
		name: "labelled container no row knows",
		kind: RepairEnvironmentRemoved,
		setup: func(t *testing.T) (string, func(*testing.T)) {
			ref := labelledContainer(t, owner, ids.New("sb"), w.ID)
			// Another daemon's container on the same engine is never touched.
			other := labelledContainer(t, OwnerID(t.TempDir()), ids.New("sb"), w.ID)
			return "docker:" + ref, func(t *testing.T) {
				if containerExists(t, ref) {
					t.Errorf("orphan container %s left", ref)
				}
				if !containerExists(t, other) {
					t.Errorf("another daemon's container %s was removed", other)
				}
			}
		},
	}, {
		name: "container of a stopped sandbox",
		kind: RepairEnvironmentRemoved,
		setup: func(t *testing.T) (string, func(*testing.T)) {
			sb := fakeRow(t, sandbox.StateStopped)
			ref := labelledContainer(t, owner, sb.ID, w.ID)
			return "docker:" + ref, func(t *testing.T) {
				if containerExists(t, ref) {
					t.Errorf("container %s left", ref)
				}
			}
		},
	}, {
		name: "interrupted sandbox create",
		kind: RepairSandboxRolledBack,
		setup: func(t *testing.T) (string, func(*testing.T)) {
			sb := fakeRow(t, sandbox.StateCreating)
			ref := labelledContainer(t, owner, sb.ID, w.ID)
			if err := os.MkdirAll(filepath.Join(h.m.sandboxDir(sb.ID), "run"), 0o700); err != nil {
				t.Fatal(err)
			}
			return sb.ID, func(t *testing.T) {
				if _, err := h.m.GetSandbox(ctx, sb.ID); !errors.Is(err, errdefs.ErrNotFound) {
					t.Errorf("row of the interrupted create: %v", err)
				}
				if containerExists(t, ref) || exists(h.m.sandboxDir(sb.ID)) {
					t.Errorf("container %s (%v) or run dir (%v) left", ref, containerExists(t, ref), exists(h.m.sandboxDir(sb.ID)))
				}
			}
		},
	}, {
		name: "workspace mount missing",
		kind: RepairWorkspaceRemounted,
		setup: func(t *testing.T) (string, func(*testing.T)) {
			v := h.sub(t).create(CreateRequest{Repo: h.repo.ID})
			h.sub(t).writeFile(v.ID, "kept.txt", "kept\n")
			testutil.Unmount(t, h.files(v))
			return v.ID, func(t *testing.T) {
				if !isMounted(t, h.files(v)) {
					t.Fatal("not mounted again")
				}
				b, err := os.ReadFile(filepath.Join(h.files(v), "kept.txt"))
				if string(b) != "kept\n" {
					t.Errorf("kept.txt = %q, %v", b, err)
				}
			}
		},
	}, {
		name: "quota workspace whose volume and overlay are gone",
		kind: RepairWorkspaceRemounted,
		setup: func(t *testing.T) (string, func(*testing.T)) {
			v := h.sub(t).create(CreateRequest{Repo: h.repo.ID, Disk: 16 << 20})
			h.sub(t).writeFile(v.ID, "kept.txt", "kept\n")
			for _, mp := range mountsUnder(t, v.Dir) { // deepest first
				testutil.Unmount(t, mp)
			}
			return v.ID, func(t *testing.T) {
				if n := len(mountsUnder(t, v.Dir)); n != 2 {
					t.Fatalf("%d mounts under the workspace, want the volume and the overlay", n)
				}
				b, err := os.ReadFile(filepath.Join(h.files(v), "kept.txt"))
				if string(b) != "kept\n" {
					t.Errorf("kept.txt = %q, %v", b, err)
				}
			}
		},
	}, {
		name: "mount of no workspace",
		kind: RepairMountRemoved,
		also: []string{RepairDirRemoved},
		setup: func(t *testing.T) (string, func(*testing.T)) {
			mp := filepath.Join(h.data, "workspaces", ids.New("ws"), "merged")
			if err := os.MkdirAll(mp, 0o700); err != nil {
				t.Fatal(err)
			}
			if err := unix.Mount("tmpfs", mp, "tmpfs", 0, "size=1m"); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { unix.Unmount(mp, unix.MNT_DETACH) })
			return mp, func(t *testing.T) {
				if isMounted(t, mp) || exists(filepath.Dir(mp)) {
					t.Errorf("mount (%v) or directory (%v) left", isMounted(t, mp), exists(filepath.Dir(mp)))
				}
			}
		},
	}, {
		name: "workspace directory without a row",
		kind: RepairDirRemoved,
		setup: func(t *testing.T) (string, func(*testing.T)) {
			dir := filepath.Join(h.data, "workspaces", ids.New("ws"))
			if err := os.MkdirAll(filepath.Join(dir, "upper", "x"), 0o700); err != nil {
				t.Fatal(err)
			}
			return dir, func(t *testing.T) {
				if exists(dir) {
					t.Error("directory left")
				}
			}
		},
	}, {
		name: "sandbox run directory without a row",
		kind: RepairDirRemoved,
		setup: func(t *testing.T) (string, func(*testing.T)) {
			dir := h.m.sandboxDir(ids.New("sb"))
			if err := os.MkdirAll(filepath.Join(dir, "run"), 0o700); err != nil {
				t.Fatal(err)
			}
			return dir, func(t *testing.T) {
				if exists(dir) {
					t.Error("directory left")
				}
			}
		},
	}, {
		name: "interrupted workspace create",
		kind: RepairWorkspaceRolledBack,
		setup: func(t *testing.T) (string, func(*testing.T)) {
			v := w
			v.ID, v.State, v.Branch = ids.New("ws"), store.WorkspaceCreating, "b"
			v.Dir = filepath.Join(h.data, "workspaces", v.ID)
			if err := h.st.CreateWorkspace(ctx, v); err != nil {
				t.Fatal(err)
			}
			if err := os.MkdirAll(filepath.Join(v.Dir, "upper"), 0o700); err != nil {
				t.Fatal(err)
			}
			return v.ID, func(t *testing.T) {
				if _, err := h.st.GetWorkspace(ctx, v.ID); !errors.Is(err, errdefs.ErrNotFound) || exists(v.Dir) {
					t.Errorf("row (%v) or directory (%v) left", err, exists(v.Dir))
				}
			}
		},
	}, {
		name: "pristine row whose checkout is gone",
		kind: RepairPristineForgotten,
		setup: func(t *testing.T) (string, func(*testing.T)) {
			pc := store.Pristine{ID: ids.New("pc"), RepoID: h.repo.ID, Commit: strings.Repeat("a", 40),
				Path: filepath.Join(h.data, "pristine", "gone"), CreatedAt: time.Now(), LastUsedAt: time.Now()}
			if err := h.st.CreatePristine(ctx, pc); err != nil {
				t.Fatal(err)
			}
			return pc.ID, func(t *testing.T) {
				if _, err := h.st.GetPristine(ctx, pc.ID); !errors.Is(err, errdefs.ErrNotFound) {
					t.Errorf("pristine row: %v", err)
				}
			}
		},
	}}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			object, check := tc.setup(t)
			before := counter.get(tc.kind)
			repairs, err := h.m.Reconcile(ctx)
			if err != nil {
				t.Errorf("Reconcile: %v", err)
			}
			if len(repairs) != 1+len(tc.also) || repairs[0].Kind != tc.kind || repairs[0].Object != object {
				t.Fatalf("repairs = %+v, want one %s of %s", repairs, tc.kind, object)
			}
			if got := counter.get(tc.kind); got != before+1 {
				t.Errorf("%s repairs counted: %d, want %d", tc.kind, got, before+1)
			}
			evs, err := h.m.Events(ctx, store.EventFilter{Type: "reconcile." + tc.kind})
			if err != nil {
				t.Fatal(err)
			}
			found := false
			for _, e := range evs {
				var d struct{ Object string }
				json.Unmarshal([]byte(e.Detail), &d)
				if d.Object == object || e.WorkspaceID == object || e.SandboxID == object {
					found = e.Actor == "daemon"
				}
			}
			if !found {
				t.Errorf("no reconcile.%s event by the daemon for %s in %+v", tc.kind, object, evs)
			}
			check(t)
			if again, err := h.m.Reconcile(ctx); len(again) != 0 || err != nil {
				t.Errorf("second pass: %+v, %v", again, err)
			}
		})
	}

	t.Run("repo directory without a row goes at the second pass", func(t *testing.T) {
		dir := filepath.Join(h.data, "repos", ids.New("repo")+".git")
		if err := os.MkdirAll(dir, 0o700); err != nil {
			t.Fatal(err)
		}
		// A clone renames its directory into place just before it records
		// the row: one sighting is not enough.
		if repairs, _ := h.m.Reconcile(ctx); len(repairs) != 0 || !exists(dir) {
			t.Fatalf("first pass: %+v, dir kept: %v", repairs, exists(dir))
		}
		repairs, _ := h.m.Reconcile(ctx)
		if len(repairs) != 1 || repairs[0].Kind != RepairDirRemoved || exists(dir) {
			t.Fatalf("second pass: %+v, dir kept: %v", repairs, exists(dir))
		}
	})

	t.Run("a create in progress is left alone", func(t *testing.T) {
		sb := fakeRow(t, sandbox.StateCreating)
		ref := labelledContainer(t, owner, sb.ID, w.ID)
		release := h.m.hold(sb.ID)
		if repairs, err := h.m.Reconcile(ctx); len(repairs) != 0 || err != nil {
			t.Errorf("pass during the create: %+v, %v", repairs, err)
		}
		if !containerExists(t, ref) {
			t.Fatal("the container of a create in progress was removed")
		}
		// The workspace lock held by an exec or a create is respected too.
		release()
		l := h.m.lock("sb:" + w.ID)
		l.Lock()
		repairs, _ := h.m.Reconcile(ctx)
		l.Unlock()
		if len(repairs) != 0 || !containerExists(t, ref) {
			t.Errorf("pass under the workspace's lock: %+v", repairs)
		}
		repairs, _ = h.m.Reconcile(ctx)
		if len(repairs) != 1 || repairs[0].Kind != RepairSandboxRolledBack || containerExists(t, ref) {
			t.Errorf("pass after the create ended: %+v", repairs)
		}
	})

	t.Run("at start", func(t *testing.T) {
		// An orphan container and directory left by a previous run go
		// before the daemon serves.
		ref := labelledContainer(t, owner, ids.New("sb"), w.ID)
		dir := filepath.Join(h.data, "pristine", ids.New("pc"))
		os.MkdirAll(dir, 0o700)
		h.reopen()
		if containerExists(t, ref) || exists(dir) {
			t.Errorf("after a restart: container %v, pristine dir %v", containerExists(t, ref), exists(dir))
		}
		if repairs, err := h.m.Reconcile(context.Background()); len(repairs) != 0 || err != nil {
			t.Errorf("pass after the start pass: %+v, %v", repairs, err)
		}
	})
}

// TestReconcileLocalJails runs the reconciler over the local backend's
// jails: one whose guest was killed from outside, and one left by a
// daemon that died between starting the jail and recording it.
func TestReconcileLocalJails(t *testing.T) {
	requireDriver(t, workspace.Overlay)
	imagesDir := filepath.Join(t.TempDir(), "images")
	ctx := t.Context()
	if _, err := image.Build(ctx, image.BuildOptions{Kind: image.KindBusybox, RootfsDir: filepath.Join(imagesDir, "busybox", "rootfs"), NoEngine: true}); err != nil {
		t.Fatalf("building the busybox root file system: %v", err)
	}
	gb := guestBinary(t)
	h := &harness{t: t, driver: workspace.Overlay, data: t.TempDir(), home: t.TempDir()}
	stateDir := filepath.Join(h.data, "local")
	var lb *local.Backend
	newBackend := func() {
		b, err := local.New(local.Options{StateDir: stateDir, ImagesDir: imagesDir})
		if err != nil {
			skip.OrFail(t, fmt.Sprintf("the local backend is unavailable: %v", err))
		}
		lb = b
	}
	newBackend()
	t.Cleanup(func() { lb.Close() })
	h.configure = func(c *Config) {
		c.Backends = map[string]sandbox.Backend{"local": lb}
		c.DefaultBackend, c.DefaultImage, c.GuestBinary = "local", "busybox", gb
	}
	h.open()
	t.Cleanup(h.cleanup)
	h.src = testutil.NewRepo(t, v1Files)
	r, _, err := h.m.AddRepo(ctx, h.src.Dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	h.repo = r
	w := h.create(CreateRequest{Repo: r.ID})

	t.Run("guest killed", func(t *testing.T) {
		h := h.sub(t)
		res, _, _ := h.exec(w.ID, "true")
		sb, _ := h.m.GetSandbox(ctx, res.SandboxID)
		killJail(t, sb.BackendRef)
		// The kill is seen by the next pass that runs after the jail's
		// init is gone (bounded poll: the kernel reaps asynchronously).
		var repairs []Repair
		deadline := time.Now().Add(30 * time.Second)
		for len(repairs) == 0 && time.Now().Before(deadline) {
			if repairs, _ = h.m.Reconcile(ctx); len(repairs) == 0 {
				time.Sleep(10 * time.Millisecond) // polling, bounded
			}
		}
		if len(repairs) != 1 || repairs[0].Kind != RepairSandboxLost || repairs[0].Object != sb.ID {
			t.Fatalf("repairs = %+v, want the sandbox lost", repairs)
		}
		if exists(filepath.Join(stateDir, sb.ID)) {
			t.Error("the dead jail's record is left")
		}
		if ev := h.events(w.ID, "reconcile."+RepairSandboxLost); len(ev) != 1 || ev[0].SandboxID != sb.ID {
			t.Errorf("events: %+v", ev)
		}
	})

	t.Run("daemon died between the jail and its row", func(t *testing.T) {
		parent := h
		h := h.sub(t)
		res, _, _ := h.exec(w.ID, "true")
		sb, _ := h.m.GetSandbox(ctx, res.SandboxID)
		// The daemon dies: its jails with it, their records stay. Its row
		// still said creating, without the jail's ref.
		lb.Close()
		sb.State, sb.BackendRef = string(sandbox.StateCreating), ""
		if err := h.st.UpdateSandbox(ctx, sb); err != nil {
			t.Fatal(err)
		}
		if !exists(filepath.Join(stateDir, sb.ID)) {
			t.Fatal("no jail record to find")
		}
		newBackend()
		parent.reopen() // the harness's own, which its cleanup uses
		h = parent.sub(t)
		if exists(filepath.Join(stateDir, sb.ID)) {
			t.Error("the jail of the interrupted create is left after the start")
		}
		evs, _ := h.m.Events(ctx, store.EventFilter{SandboxID: sb.ID, Type: "reconcile." + RepairEnvironmentRemoved})
		if len(evs) != 1 || evs[0].Actor != "daemon" {
			t.Errorf("events: %+v", evs)
		}
	})
}

// killJail kills every process of local sandbox id from outside, as a
// crash or an operator would.
func killJail(t *testing.T, id string) {
	t.Helper()
	files, _ := filepath.Glob("/sys/fs/cgroup/*/agentbox/" + id + "/cgroup.procs")
	more, _ := filepath.Glob("/sys/fs/cgroup/agentbox/" + id + "/cgroup.procs")
	killed := 0
	for _, f := range append(files, more...) {
		b, _ := os.ReadFile(f)
		for _, f := range strings.Fields(string(b)) {
			if pid, err := strconv.Atoi(f); err == nil && unix.Kill(pid, unix.SIGKILL) == nil {
				killed++
			}
		}
	}
	if killed == 0 {
		t.Fatalf("no process of local sandbox %s found to kill", id)
	}
}
