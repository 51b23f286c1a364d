package envdfs

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/agentbox/agentbox/internal/backend/docker"
	"github.com/agentbox/agentbox/internal/backend/local"
	"github.com/agentbox/agentbox/internal/e2b/envdfs/fspb"
	"github.com/agentbox/agentbox/internal/errdefs"
	"github.com/agentbox/agentbox/internal/guest"
	"github.com/agentbox/agentbox/internal/image"
	"github.com/agentbox/agentbox/internal/manager"
	"github.com/agentbox/agentbox/internal/sandbox"
	"github.com/agentbox/agentbox/internal/sandbox/backendtest"
	"github.com/agentbox/agentbox/internal/store"
	"github.com/agentbox/agentbox/internal/store/sqlstore"
	"github.com/agentbox/agentbox/internal/workspace"
)

const testImage = "agentbox/busybox:latest"

// assets are built once for every sandbox test: the guest and the local
// backend's busybox root file system.
var assets = struct {
	once      sync.Once
	err       error
	dir       string
	guest     string
	imagesDir string
}{}

func sandboxAssets(t *testing.T) (guestBin, imagesDir string) {
	t.Helper()
	assets.once.Do(func() {
		assets.dir, assets.err = os.MkdirTemp("", "agentbox-envdfs-")
		if assets.err != nil {
			return
		}
		assets.guest, assets.err = backendtest.BuildGuest(assets.dir)
		assets.imagesDir = filepath.Join(assets.dir, "images")
	})
	if assets.err != nil {
		t.Fatal(assets.err)
	}
	return assets.guest, assets.imagesDir
}

var localRootfs = struct {
	once sync.Once
	err  error
}{}

// forEachBackend runs f as a parallel subtest on docker, gvisor and local,
// each with a manager of its own, a scratch workspace and a running
// sandbox on it.
func forEachBackend(t *testing.T, f func(t *testing.T, fx *fixture)) {
	if os.Geteuid() != 0 {
		backendtest.SkipOrFail(t, "sandbox tests need root (overlay workspaces, cgroups)")
	}
	for _, name := range []string{docker.NameDocker, docker.NameGVisor, local.Name} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			f(t, newSandboxFixture(t, name))
		})
	}
}

func newSandboxFixture(t *testing.T, name string) *fixture {
	t.Helper()
	guestBin, imagesDir := sandboxAssets(t)
	data := t.TempDir()
	if err := workspace.ProbeOverlay(data); err != nil {
		backendtest.SkipOrFail(t, "overlay mounts do not work here: "+err.Error())
	}
	var be sandbox.Backend
	switch name {
	case docker.NameDocker, docker.NameGVisor:
		runtime := docker.RuntimeRunc
		if name == docker.NameGVisor {
			runtime = docker.RuntimeRunsc
		}
		out, err := exec.Command("docker", "info", "--format", "{{json .Runtimes}}").CombinedOutput()
		if err != nil || !bytes.Contains(out, []byte(`"`+runtime+`"`)) {
			backendtest.SkipOrFail(t, fmt.Sprintf("no Docker engine with the %s runtime: %v %s", runtime, err, out))
		}
		if err := exec.Command("docker", "image", "inspect", testImage).Run(); err != nil {
			backendtest.SkipOrFail(t, testImage+" is not in the engine: run agentbox image build --kind busybox")
		}
		b, err := docker.New(docker.Options{Name: name, Runtime: runtime, MountDir: filepath.Join(data, "binds")})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { b.Close() })
		be = b
	case local.Name:
		if _, err := exec.LookPath("bwrap"); err != nil {
			backendtest.SkipOrFail(t, "bubblewrap is not installed")
		}
		localRootfs.once.Do(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			_, localRootfs.err = image.Build(ctx, image.BuildOptions{Kind: image.KindBusybox, RootfsDir: filepath.Join(imagesDir, "busybox", "rootfs"), NoEngine: true})
		})
		if localRootfs.err != nil {
			t.Fatalf("building the local busybox root file system: %v", localRootfs.err)
		}
		parent := "agentbox-envdfs-" + randHex(4)
		b, err := local.New(local.Options{StateDir: filepath.Join(data, "local"), ImagesDir: imagesDir, CgroupParent: parent})
		if err != nil {
			backendtest.SkipOrFail(t, "local backend: "+err.Error())
		}
		t.Cleanup(func() {
			if err := b.Close(); err != nil {
				t.Errorf("closing the local backend: %v", err)
			}
			for _, c := range []string{"memory", "pids", "cpu", "freezer", "cpuacct", "cpu,cpuacct", ""} {
				os.Remove(filepath.Join("/sys/fs/cgroup", c, parent))
			}
		})
		be = b
	}
	st, err := sqlstore.Open(t.Context(), filepath.Join(data, "agentbox.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	m, err := manager.New(t.Context(), st, manager.Config{DataDir: data, UID: 1000, GID: 1000,
		Backends: map[string]sandbox.Backend{name: be}, DefaultBackend: name, DefaultImage: testImage, GuestBinary: guestBin})
	if err != nil {
		t.Fatal(err)
	}
	ws, err := m.CreateWorkspace(t.Context(), manager.CreateRequest{Empty: true, Task: "envdfs " + t.Name()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx := context.Background()
		sbs, _ := st.ListSandboxes(ctx, store.SandboxFilter{})
		if err := m.RemoveWorkspace(ctx, ws.ID); err != nil {
			t.Errorf("cleanup: %v", err)
		}
		for _, sb := range sbs {
			left, _ := be.List(ctx, map[string]string{sandbox.LabelSandbox: sb.ID})
			for _, in := range left {
				t.Errorf("sandbox %s: environment %s left after cleanup", sb.ID, in.Ref)
				be.Remove(ctx, in.Ref)
			}
		}
	})
	sb, err := m.CreateSandbox(t.Context(), ws.ID, sandbox.Spec{})
	if err != nil {
		t.Fatalf("CreateSandbox on %s: %v", name, err)
	}
	alive := func(ctx context.Context) error {
		cur, err := m.GetSandbox(ctx, sb.ID)
		if err == nil && cur.State != string(sandbox.StateRunning) {
			err = fmt.Errorf("sandbox %s is %s: %w", sb.ID, cur.State, errdefs.ErrUnavailable)
		}
		return err
	}
	return newFixture(t, fixtureOpts{m: m, ws: ws, alive: alive, target: Target{SandboxID: sb.ID, WorkspaceID: ws.ID, User: "user", Home: "/home/user"}})
}

// sh runs script in the fixture's sandbox and returns its stdout.
func (f *fixture) sh(t *testing.T, script string) string {
	t.Helper()
	var out, errOut bytes.Buffer
	ctx, cancel := context.WithTimeout(t.Context(), 90*time.Second)
	defer cancel()
	res, err := f.m.Exec(ctx, f.target.SandboxID, guest.ExecRequest{Argv: []string{"sh", "-c", script}, Env: []string{"PATH=/bin:/usr/bin"}, Timeout: 60 * time.Second}, nil, &out, &errOut)
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("sh %q: %v %+v\nstderr: %s", script, err, res, errOut.String())
	}
	return out.String()
}

// TestSandboxWatch: a recursive watch sees what a command inside the
// sandbox does to the workspace, on every backend; files written through
// the API are what the sandbox reads; the watch ends when the sandbox
// stops.
func TestSandboxWatch(t *testing.T) {
	forEachBackend(t, func(t *testing.T, f *fixture) {
		s, err := f.watch(t, &fspb.WatchDirRequest{Path: "/workspace", Recursive: true})
		if err != nil {
			t.Fatal(err)
		}
		// The watch of a new directory is in place once its create event
		// is out; what the sandbox does there before that is lost (as
		// with any inotify watcher), so the test waits for it.
		f.sh(t, `mkdir /workspace/d`)
		s.until(t, ev{"d", "create"}, 30*time.Second)
		f.sh(t, `cd /workspace && echo hi > d/f && echo more >> d/f && mv d/f d/g && chmod 600 d/g && rm d/g && mkdir -p d/e/n && echo x > d/e/n/deep && touch done`)
		got := s.until(t, ev{"done", "create"}, 30*time.Second)
		t.Logf("events of the command: %v", got)
		for _, want := range []ev{{"d/f", "create"}, {"d/f", "write"}, {"d/f", "rename"}, {"d/g", "create"}, {"d/g", "chmod"}, {"d/g", "remove"}, {"d/e", "create"}} {
			if !contains(got, want) {
				t.Errorf("no %v among the events of the sandbox's commands: %v", want, got)
			}
		}
		// d/e/n/deep was made before d/e was watched, or after: either
		// way it is reported.
		if !contains(got, ev{"d/e/n/deep", "create"}) && !contains(got, ev{"d/e/n/deep", "write"}) {
			t.Errorf("d/e/n/deep not reported: %v", got)
		}

		// Uploads land where the sandbox reads them, at the home's alias
		// and at /workspace alike.
		if status, body := f.postFiles(t, "?path=up.txt", upload{"up.txt", []byte("from the SDK")}); status != 200 {
			t.Fatalf("upload: %d %s", status, body)
		}
		s.until(t, ev{"up.txt", "write"}, 30*time.Second)
		if out := f.sh(t, "cat /workspace/up.txt"); out != "from the SDK" {
			t.Errorf("the sandbox reads %q", out)
		}
		if out := f.sh(t, "printf made-inside > /workspace/in.txt"); out != "" {
			t.Fatal(out)
		}
		if status, body, _ := f.get(t, "?path=/home/user/in.txt"); status != 200 || string(body) != "made-inside" {
			t.Errorf("download of a file the sandbox wrote: %d %q", status, body)
		}

		// The sandbox stops (the resolver fails for it now): the watch
		// ends, unavailable (the SDK's "sandbox is gone").
		if _, err := f.m.StopSandbox(t.Context(), f.target.SandboxID); err != nil {
			t.Fatal(err)
		}
		timer := time.NewTimer(4 * aliveEvery)
		defer timer.Stop()
		for {
			select {
			case _, ok := <-s.events:
				if ok {
					continue
				}
				if connect.CodeOf(s.err) != connect.CodeUnavailable || !strings.Contains(s.err.Error(), f.target.SandboxID) {
					t.Errorf("watch ended with %v, want unavailable naming the sandbox", s.err)
				}
				return
			case <-timer.C:
				t.Fatal("the watch outlived its sandbox")
			}
		}
	})
}
