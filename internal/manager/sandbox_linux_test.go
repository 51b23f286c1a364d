package manager

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentbox/agentbox/internal/backend/docker"
	"github.com/agentbox/agentbox/internal/errdefs"
	"github.com/agentbox/agentbox/internal/guest"
	"github.com/agentbox/agentbox/internal/sandbox"
	"github.com/agentbox/agentbox/internal/store"
	"github.com/agentbox/agentbox/internal/testutil"
	"github.com/agentbox/agentbox/internal/testutil/skip"
	"github.com/agentbox/agentbox/internal/workspace"
)

const testImage = "agentbox/busybox:latest"

var (
	guestOnce sync.Once
	guestPath string
	guestErr  error
)

// guestBinary builds cmd/agentbox-guest once for the package's tests.
func guestBinary(t *testing.T) string {
	guestOnce.Do(func() {
		dir, err := os.MkdirTemp("", "agentbox-guest-")
		if err != nil {
			guestErr = err
			return
		}
		guestPath = filepath.Join(dir, "agentbox-guest")
		cmd := exec.Command("go", "build", "-o", guestPath, "../../cmd/agentbox-guest")
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			guestErr = errors.New(string(out))
		}
	})
	if guestErr != nil {
		t.Fatalf("building agentbox-guest: %v", guestErr)
	}
	return guestPath
}

// sandboxHarness is a harness whose manager has the real docker backend.
func sandboxHarness(t *testing.T) (*harness, sandbox.Backend) {
	t.Helper()
	requireDriver(t, workspace.Overlay)
	be, err := docker.New(docker.Options{Name: docker.NameDocker, Runtime: docker.RuntimeRunc})
	if err == nil {
		_, err = be.List(t.Context(), map[string]string{sandbox.LabelManaged: "1"})
	}
	if err != nil {
		skip.OrFail(t, fmt.Sprintf("the docker backend is unavailable: %v", err))
	}
	gb := guestBinary(t)
	h := &harness{t: t, driver: workspace.Overlay, data: t.TempDir(), home: t.TempDir()}
	h.configure = func(c *Config) {
		c.Backends = map[string]sandbox.Backend{"docker": be}
		c.DefaultBackend, c.DefaultImage, c.GuestBinary = "docker", testImage, gb
	}
	h.open()
	// Cleanups run last-registered first: collect this test's sandboxes,
	// let the harness remove every workspace, then check that no
	// environment of them survived.
	var ids []string
	t.Cleanup(func() {
		for _, id := range ids {
			left, _ := be.List(context.Background(), map[string]string{sandbox.LabelSandbox: id})
			for _, in := range left {
				t.Errorf("sandbox %s: environment %s (%s) left after cleanup", id, in.Ref, in.State)
				be.Remove(context.Background(), in.Ref)
			}
		}
	})
	t.Cleanup(h.cleanup)
	t.Cleanup(func() {
		sbs, _ := h.st.ListSandboxes(context.Background(), store.SandboxFilter{})
		for _, sb := range sbs {
			ids = append(ids, sb.ID)
		}
	})
	h.src = testutil.NewRepo(t, v1Files)
	r, _, err := h.m.AddRepo(t.Context(), h.src.Dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	h.repo = r
	return h, be
}

func (h *harness) exec(target string, argv ...string) (ExecOutcome, string, string) {
	h.t.Helper()
	var out, errb bytes.Buffer
	res, err := h.m.Exec(h.t.Context(), target, guest.ExecRequest{Argv: argv, Env: []string{"PATH=/bin:/usr/bin"}, Timeout: 30 * time.Second}, nil, &out, &errb)
	if err != nil {
		h.t.Fatalf("exec %v in %s: %v", argv, target, err)
	}
	return res, out.String(), errb.String()
}

func TestSandboxLifecycle(t *testing.T) {
	h, be := sandboxHarness(t)
	ctx := t.Context()
	w := h.create(CreateRequest{Repo: h.repo.ID})

	// The first exec on a workspace without a sandbox starts one; that is
	// not a replacement.
	res, out, _ := h.exec(w.ID, "sh", "-c", "id -u; echo from-sandbox > /workspace/made-inside.txt; cat /workspace/README.md")
	if res.ExitCode != 0 || res.Replaced || !strings.HasPrefix(out, "1000\nhello\n") {
		t.Fatalf("first exec: %+v %q", res, out)
	}
	if got, ok := h.readFile(w.ID, "made-inside.txt"); !ok || got != "from-sandbox\n" {
		t.Errorf("file written inside, read through the file API = %q, %v", got, ok)
	}
	first := res.SandboxID
	sb, err := h.m.GetSandbox(ctx, first)
	if err != nil || sb.State != string(sandbox.StateRunning) || sb.BackendRef == "" {
		t.Fatalf("sandbox = %+v, %v", sb, err)
	}
	// A second sandbox on the same workspace is refused.
	if _, err := h.m.CreateSandbox(ctx, w.ID, sandbox.Spec{}); !errors.Is(err, errdefs.ErrConflict) {
		t.Errorf("second CreateSandbox = %v, want conflict", err)
	}

	// Kill the environment from outside: the next exec heals, says so, and
	// the workspace is intact; nothing from the old /tmp survives.
	h.exec(w.ID, "sh", "-c", "echo tmpdata > /tmp/x")
	if err := be.Remove(ctx, sb.BackendRef); err != nil {
		t.Fatal(err)
	}
	res, out, _ = h.exec(w.ID, "sh", "-c", "cat /workspace/made-inside.txt; cat /tmp/x 2>/dev/null || echo no-tmp")
	if !res.Replaced || res.SandboxID == first || out != "from-sandbox\nno-tmp\n" {
		t.Fatalf("after kill: %+v %q", res, out)
	}
	if old, _ := h.m.GetSandbox(ctx, first); old.State != string(sandbox.StateLost) {
		t.Errorf("old sandbox state = %s, want lost", old.State)
	}
	if ev := h.events(w.ID, "sandbox.lost"); len(ev) != 1 {
		t.Errorf("%d sandbox.lost events, want 1", len(ev))
	}

	// A timeout kills the tree and is reported.
	var outb bytes.Buffer
	res, err = h.m.Exec(ctx, w.ID, guest.ExecRequest{Argv: []string{"sh", "-c", "sleep 100 & sleep 100"}, Env: []string{"PATH=/bin"}, Timeout: time.Second}, nil, &outb, &outb)
	if err != nil || !res.TimedOut {
		t.Errorf("timeout exec = %+v, %v", res, err)
	}
	execs, _ := h.st.ListExecs(ctx, store.ExecFilter{WorkspaceID: w.ID})
	if len(execs) != 4 || execs[3].State != store.ExecTimedOut {
		t.Errorf("exec records = %+v", execs)
	}

	// A daemon restart marks the sandbox lost; the next exec replaces it.
	second := res.SandboxID
	h.reopen()
	if sb, _ := h.m.GetSandbox(ctx, second); sb.State != string(sandbox.StateLost) {
		t.Errorf("after restart: state %s, want lost", sb.State)
	}
	res, _, _ = h.exec(w.ID, "true")
	if !res.Replaced || res.ExitCode != 0 {
		t.Errorf("exec after restart = %+v", res)
	}

	// Removing the workspace removes its sandboxes and their environments.
	third := res.SandboxID
	thirdSB, _ := h.m.GetSandbox(ctx, third)
	if err := h.m.RemoveWorkspace(ctx, w.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := be.Inspect(ctx, thirdSB.BackendRef); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("environment after workspace removal: %v", err)
	}
	if left, _ := h.st.ListSandboxes(ctx, store.SandboxFilter{WorkspaceID: w.ID}); len(left) != 0 {
		t.Errorf("%d sandbox rows left", len(left))
	}
	if entries, _ := os.ReadDir(filepath.Join(h.data, "sandboxes")); len(entries) != 0 {
		t.Errorf("sandbox dirs left: %v", entries)
	}
}

func TestSandboxBadInputChangesNothing(t *testing.T) {
	h, be := sandboxHarness(t)
	ctx := t.Context()
	w := h.create(CreateRequest{Repo: h.repo.ID})
	for name, spec := range map[string]sandbox.Spec{
		"unknown backend": {Backend: "vmware"},
		"unknown image":   {Image: "agentbox/no-such-image:latest"},
		"absurd memory":   {Limits: sandbox.Limits{MemoryBytes: 10}},
		"absurd cpus":     {Limits: sandbox.Limits{CPUs: 1e6}},
	} {
		t.Run(name, func(t *testing.T) {
			if _, err := h.m.CreateSandbox(ctx, w.ID, spec); err == nil {
				t.Fatal("accepted")
			} else if !errors.Is(err, errdefs.ErrInvalid) {
				t.Errorf("error %v is not invalid", err)
			}
			if sbs, _ := h.st.ListSandboxes(ctx, store.SandboxFilter{}); len(sbs) != 0 {
				t.Errorf("%d sandbox rows", len(sbs))
			}
			if left, _ := be.List(ctx, map[string]string{sandbox.LabelWorkspace: w.ID}); len(left) != 0 {
				t.Errorf("%d environments left", len(left))
			}
			if entries, _ := os.ReadDir(filepath.Join(h.data, "sandboxes")); len(entries) != 0 {
				t.Errorf("sandbox dirs left: %v", entries)
			}
		})
	}
	if _, err := h.m.Exec(ctx, w.ID, guest.ExecRequest{}, nil, nil, nil); !errors.Is(err, errdefs.ErrInvalid) {
		t.Errorf("empty command: %v", err)
	}
	if _, err := h.m.Exec(ctx, "ws_nope", guest.ExecRequest{Argv: []string{"true"}}, nil, nil, nil); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("unknown workspace: %v", err)
	}
}

// TestSandboxCreateRollsBack injects a failure at each step of a sandbox
// creation: nothing of the half-made sandbox may remain.
func TestSandboxCreateRollsBack(t *testing.T) {
	h, be := sandboxHarness(t)
	ctx := t.Context()
	w := h.create(CreateRequest{Repo: h.repo.ID})
	for _, step := range []string{"sandbox-listen", "sandbox-backend", "sandbox-guest"} {
		t.Run(step, func(t *testing.T) {
			injected := errors.New("injected at " + step)
			h.m.failAt = func(s string) error {
				if s == step {
					return injected
				}
				return nil
			}
			defer func() { h.m.failAt = nil }()
			if _, err := h.m.CreateSandbox(ctx, w.ID, sandbox.Spec{}); !errors.Is(err, injected) {
				t.Fatalf("CreateSandbox = %v, want the injected error", err)
			}
			if sbs, _ := h.st.ListSandboxes(ctx, store.SandboxFilter{}); len(sbs) != 0 {
				t.Errorf("%d sandbox rows left", len(sbs))
			}
			if left, _ := be.List(ctx, map[string]string{sandbox.LabelWorkspace: w.ID}); len(left) != 0 {
				t.Errorf("%d environments left", len(left))
			}
			if entries, _ := os.ReadDir(filepath.Join(h.data, "sandboxes")); len(entries) != 0 {
				t.Errorf("sandbox dirs left: %v", entries)
			}
		})
	}
	// And a normal create works afterwards.
	if _, err := h.m.CreateSandbox(ctx, w.ID, sandbox.Spec{}); err != nil {
		t.Fatal(err)
	}
}

// TestStopDuringExec: a sandbox stopped while a command runs in it stays
// stopped. The command ends (lost: its environment went away), and
// recording that end neither undoes the stop nor calls it a loss; the
// sandbox's last activity still moves forward.
func TestStopDuringExec(t *testing.T) {
	h, _ := sandboxHarness(t)
	ctx := t.Context()
	w := h.create(CreateRequest{Repo: h.repo.ID})
	res, _, _ := h.exec(w.ID, "true")
	sbID := res.SandboxID
	before, err := h.m.GetSandbox(ctx, sbID)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan ExecOutcome, 1)
	// The command runs once it says so: its record says running a little
	// earlier, before the command reaches the guest, and a stop in that gap
	// would (rightly) send it to a new sandbox instead.
	started := &firstWrite{c: make(chan struct{})}
	go func() {
		res, _ := h.m.Exec(ctx, w.ID, guest.ExecRequest{Argv: []string{"sh", "-c", "echo started; exec sleep 60"}, Env: []string{"PATH=/bin"}, Timeout: time.Minute}, nil, started, io.Discard)
		done <- res
	}()
	select {
	case <-started.c:
	case <-time.After(15 * time.Second):
		t.Fatal("the long command never started")
	}
	if _, err := h.m.StopSandbox(ctx, sbID); err != nil {
		t.Fatal(err)
	}
	var out ExecOutcome
	select {
	case out = <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("the command did not end after its sandbox was stopped")
	}
	if out.ExitCode == 0 || out.TimedOut {
		t.Errorf("the command in the stopped sandbox ended %+v", out.ExecResult)
	}
	after, err := h.m.GetSandbox(ctx, sbID)
	if err != nil {
		t.Fatal(err)
	}
	if after.State != string(sandbox.StateStopped) {
		t.Errorf("state after a stop during an exec = %s, want stopped", after.State)
	}
	if !after.LastActivityAt.After(before.LastActivityAt) {
		t.Errorf("last activity %v did not move past %v", after.LastActivityAt, before.LastActivityAt)
	}
	if ev := h.events(w.ID, "sandbox.lost"); len(ev) != 0 {
		t.Errorf("%d sandbox.lost events for a stopped sandbox", len(ev))
	}
}

// TestRefusedSpecIsKept: a sandbox spec asked for and refused is never replaced by the
// default backend's: the workspace remembers it, an exec that has to start a sandbox
// uses it and fails with the reason, and a later create with another spec replaces it.
func TestRefusedSpecIsKept(t *testing.T) {
	h, _ := sandboxHarness(t)
	h.m.cfg.Unavailable = map[string]string{"local": "bubblewrap is not installed"}
	w := h.create(CreateRequest{Repo: h.repo.ID})
	ctx := t.Context()

	// An unavailable backend, then an image the engine lacks: both refused.
	for _, spec := range []sandbox.Spec{
		{Backend: "local"},
		{Backend: "docker", Image: "agentbox-test/no-such-image:1"},
	} {
		if _, err := h.m.CreateSandbox(ctx, w.ID, spec); err == nil {
			t.Fatalf("CreateSandbox(%+v) succeeded", spec)
		}
		_, err := h.m.Exec(ctx, w.ID, guest.ExecRequest{Argv: []string{"true"}, Timeout: 30 * time.Second}, nil, io.Discard, io.Discard)
		if err == nil {
			t.Fatalf("exec after a refused %+v ran on the default backend", spec)
		}
		want := spec.Backend
		if spec.Image != "" {
			want = spec.Image
		}
		if !strings.Contains(err.Error(), want) {
			t.Errorf("exec after a refused %+v: %v, want the reason naming %s", spec, err, want)
		}
		sbs, _ := h.st.ListSandboxes(ctx, store.SandboxFilter{WorkspaceID: w.ID})
		if len(sbs) != 0 {
			t.Errorf("sandboxes after a refused %+v: %+v", spec, sbs)
		}
	}

	// Bad input changes nothing: the refused spec stays the one asked for.
	if _, err := h.m.CreateSandbox(ctx, w.ID, sandbox.Spec{Backend: "docker", Limits: sandbox.Limits{Pids: 1}}); !errors.Is(err, errdefs.ErrInvalid) {
		t.Fatalf("pids 1: %v, want invalid", err)
	}
	if got, _ := h.st.WorkspaceSandboxSpec(ctx, w.ID); !strings.Contains(got, "no-such-image") {
		t.Errorf("after invalid input the workspace remembers %q", got)
	}

	// A spec that works replaces it, and execs use it.
	if _, err := h.m.CreateSandbox(ctx, w.ID, sandbox.Spec{Backend: "docker", Image: testImage}); err != nil {
		t.Fatal(err)
	}
	if res, out, _ := h.exec(w.ID, "echo", "ok"); res.ExitCode != 0 || out != "ok\n" {
		t.Errorf("exec: %+v %q", res, out)
	}
}

// firstWrite closes c on its first write.
type firstWrite struct {
	once sync.Once
	c    chan struct{}
}

func (w *firstWrite) Write(p []byte) (int, error) {
	w.once.Do(func() { close(w.c) })
	return len(p), nil
}
