package docker

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
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

	"github.com/agentbox/agentbox/internal/errdefs"
	"github.com/agentbox/agentbox/internal/guest"
	"github.com/agentbox/agentbox/internal/hostbind"
	"github.com/agentbox/agentbox/internal/mountinfo"
	"github.com/agentbox/agentbox/internal/sandbox"
	"github.com/agentbox/agentbox/internal/sandbox/backendtest"
)

// testImage is the busybox image agentbox builds (agentbox image build
// --kind busybox); nothing is ever pulled.
const testImage = "agentbox/busybox:latest"

// guestBin is the guest binary built once for the package's tests.
var guestBin string

func TestMain(m *testing.M) { backendtest.MainWithGuest(m, &guestBin) }

// flavours are the two backends of this package.
var flavours = []struct{ name, runtime string }{
	{NameDocker, RuntimeRunc},
	{NameGVisor, RuntimeRunsc},
}

// requireEngine skips (or fails under AGENTBOX_REQUIRE_SETUP=1) unless the
// docker CLI, which the tests use as an independent oracle, reaches an
// engine with the runtime and the test image.
func requireEngine(t *testing.T, runtime string) {
	t.Helper()
	if _, err := exec.LookPath("docker"); err != nil {
		backendtest.SkipOrFail(t, "the docker CLI is not installed")
	}
	out, err := exec.Command("docker", "info", "--format", "{{json .Runtimes}}").CombinedOutput()
	if err != nil {
		backendtest.SkipOrFail(t, fmt.Sprintf("no Docker engine: %v %s", err, bytes.TrimSpace(out)))
	}
	if !bytes.Contains(out, []byte(`"`+runtime+`"`)) {
		backendtest.SkipOrFail(t, "the Docker engine has no "+runtime+" runtime (register it in /etc/docker/daemon.json)")
	}
	if err := exec.Command("docker", "image", "inspect", testImage).Run(); err != nil {
		backendtest.SkipOrFail(t, testImage+" is not in the engine: run agentbox image build --kind busybox")
	}
}

// newBackend makes a backend for a test with its own bind directory, and
// fails the test if a workspace bind outlives it.
func newBackend(t *testing.T, name, runtime string) *Backend {
	t.Helper()
	requireEngine(t, runtime)
	mountDir := filepath.Join(t.TempDir(), "binds")
	b, err := New(Options{Name: name, Runtime: runtime, MountDir: mountDir})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		// Runs before t.TempDir's RemoveAll, which must never recurse
		// through a live bind into a workspace.
		if left, _ := mountinfo.Under(mountDir); len(left) != 0 {
			t.Errorf("workspace binds left behind: %v", left)
			for _, p := range left {
				unmountAndRemove(p)
			}
		}
		b.Close()
	})
	return b
}

func harness(name, runtime string) backendtest.Harness {
	var mountDir string
	h := backendtest.Harness{
		Image: testImage,
		Guest: guestBin,
		New: func(t *testing.T) sandbox.Backend {
			b := newBackend(t, name, runtime)
			mountDir = b.mountDir
			return b
		},
		Kill: func(ctx context.Context, ref string) error {
			out, err := exec.CommandContext(ctx, "docker", "kill", ref).CombinedOutput()
			if err != nil {
				return fmt.Errorf("docker kill: %v %s", err, out)
			}
			return nil
		},
		Leftovers: func(ctx context.Context, id string) ([]string, error) {
			out, err := exec.CommandContext(ctx, "docker", "ps", "-aq", "--no-trunc", "--filter", "label="+sandbox.LabelSandbox+"="+id).Output()
			if err != nil {
				return nil, fmt.Errorf("docker ps: %v", err)
			}
			var left []string
			for _, c := range strings.Fields(string(out)) {
				left = append(left, "container "+c)
			}
			if _, err := os.Stat(filepath.Join(mountDir, id)); err == nil {
				left = append(left, "workspace bind directory "+filepath.Join(mountDir, id))
			}
			return left, nil
		},
		Logs: func(ctx context.Context, ref string) string {
			state, _ := exec.CommandContext(ctx, "docker", "inspect", "--format", "{{json .State}}", ref).CombinedOutput()
			logs, _ := exec.CommandContext(ctx, "docker", "logs", "--tail", "50", ref).CombinedOutput()
			return fmt.Sprintf("state: %s%s", state, logs)
		},
		// The shim (runc) and runsc's sandbox and gofer carry the container
		// id in their command lines.
		Markers: func(info sandbox.Info) []string { return []string{info.Ref} },
	}
	if runtime == RuntimeRunsc {
		// runsc 2026-09 on the systrap platform (scripts/setup.sh); see
		// the package comment.
		h.Quirks = backendtest.Quirks{
			HiddenMountFlags:     true,
			OOMEndsSandbox:       true,
			PidsCountHostTasks:   true,
			PidsLimitEndsSandbox: true,
			EmulatedDeviceNodes:  true,
		}
	}
	return h
}

func TestDocker(t *testing.T) {
	t.Parallel()
	backendtest.Run(t, harness(NameDocker, RuntimeRunc))
}

func TestGVisor(t *testing.T) {
	t.Parallel()
	backendtest.Run(t, harness(NameGVisor, RuntimeRunsc))
}

// TestCreateToFirstExec measures create -> first exec through each backend
// against `docker run --rm IMAGE true` on the same runtime, interleaved.
// It logs figures and asserts nothing about time. It is not parallel, so
// that it runs before the suites, alone.
func TestCreateToFirstExec(t *testing.T) {
	const n = 10
	for _, f := range flavours {
		t.Run(f.name, func(t *testing.T) {
			bench := backendtest.NewBench(t, harness(f.name, f.runtime))
			var ours, theirs []time.Duration
			for range n {
				ours = append(ours, bench.CreateToFirstExec(t))
				start := time.Now()
				if out, err := exec.Command("docker", "run", "--rm", "--runtime="+f.runtime, "--network=none", testImage, "true").CombinedOutput(); err != nil {
					t.Fatalf("docker run: %v %s", err, out)
				}
				theirs = append(theirs, time.Since(start))
			}
			mo, mt := backendtest.Median(ours), backendtest.Median(theirs)
			t.Logf("%s: create -> first exec median %s (min %s) over %d; docker run --rm --runtime=%s %s true median %s (min %s); ratio %.2f",
				f.name, mo.Round(time.Millisecond), slices.Min(ours).Round(time.Millisecond), n,
				f.runtime, testImage, mt.Round(time.Millisecond), slices.Min(theirs).Round(time.Millisecond), float64(mo)/float64(mt))
			t.Logf("%s: medians of the phases: %s", f.name, bench.Phases())
		})
	}
}

// inspected is the part of `docker inspect` the isolation test reads.
type inspected struct {
	Config struct {
		Hostname   string
		User       string
		Env        []string
		Entrypoint []string
		Cmd        []string
		Labels     map[string]string
		// NetworkDisabled keeps the engine's network controller out.
		NetworkDisabled bool
	}
	HostConfig struct {
		Runtime        string
		NetworkMode    string
		CapAdd         []string
		CapDrop        []string
		SecurityOpt    []string
		ReadonlyRootfs bool
		Privileged     bool
		Init           *bool
		PidMode        string
		IpcMode        string
		UTSMode        string
		UsernsMode     string
		CgroupnsMode   string
		Tmpfs          map[string]string
		Memory         int64
		MemorySwap     int64
		NanoCpus       int64
		PidsLimit      *int64
		Mounts         []struct {
			Type        string
			Source      string
			Target      string
			ReadOnly    bool
			BindOptions *struct{ Propagation string }
		}
	}
}

// TestIsolationSettings reads back, with the docker CLI, the container a
// sandbox runs in: every setting of the isolation, for both runtimes.
func TestIsolationSettings(t *testing.T) {
	t.Parallel()
	for _, f := range flavours {
		t.Run(f.name, func(t *testing.T) {
			t.Parallel()
			token, _ := guest.NewToken()
			b := newBackend(t, f.name, f.runtime)
			files, runDir := t.TempDir(), t.TempDir()
			req := sandbox.CreateRequest{
				ID: "sb_iso" + randID(), WorkspaceID: "ws_iso", Files: files, RunDir: runDir,
				Guest: guestBin, GuestArgs: []string{"-debug"}, GuestEnv: []string{guest.TokenEnv + "=" + token}, UID: 1234, GID: 2345,
				GuestUID: 4321, GuestGID: 5432,
				Spec: sandbox.Spec{Image: testImage, Limits: sandbox.Limits{CPUs: 0.5, MemoryBytes: 200 << 20, Pids: 321, TmpBytes: 7 << 20}},
			}
			info, err := b.Create(t.Context(), req)
			if err != nil {
				t.Fatal(err)
			}
			defer b.Remove(context.Background(), info.Ref)
			out, err := exec.Command("docker", "inspect", "--format", "{{json .}}", info.Ref).Output()
			if err != nil {
				t.Fatal(err)
			}
			var got inspected
			if err := json.Unmarshal(out, &got); err != nil {
				t.Fatal(err)
			}
			c, h := got.Config, got.HostConfig
			check := func(what string, ok bool, v any) {
				t.Helper()
				if !ok {
					t.Errorf("%s: %v", what, v)
				}
			}
			check("hostname", c.Hostname == req.ID, c.Hostname)
			// The guest starts as root to become 4321:5432 and run commands
			// as 1234:2345 (it is told both).
			check("user", c.User == "0:0", c.User)
			check("users", slices.Contains(c.Env, guest.UserEnv+"=4321:5432") && slices.Contains(c.Env, guest.CommandUserEnv+"=1234:2345"), c.Env)
			check("entrypoint", slices.Equal(c.Entrypoint, []string{sandbox.GuestPath}) && slices.Equal(c.Cmd, []string{"-debug"}), [][]string{c.Entrypoint, c.Cmd})
			for _, e := range c.Env {
				k, _, _ := strings.Cut(e, "=")
				// The image's PATH and the engine's HOSTNAME and HOME are
				// all that may join the guest's token, and under runsc the
				// guest is told not to prewarm threads nor make reapers
				// subreapers.
				check("environment", k == guest.TokenEnv || k == "PATH" || k == "HOSTNAME" || k == "HOME" || k == guest.UserEnv || k == guest.CommandUserEnv ||
					((e == guest.PrewarmEnv+"=0" || e == guest.SubreaperEnv+"=0") && f.name == NameGVisor), e)
			}
			check("no prewarm under runsc", slices.Contains(c.Env, guest.PrewarmEnv+"=0") == (f.name == NameGVisor), c.Env)
			check("no subreapers under runsc", slices.Contains(c.Env, guest.SubreaperEnv+"=0") == (f.name == NameGVisor), c.Env)
			check("token", slices.Contains(c.Env, guest.TokenEnv+"="+token), c.Env)
			check("labels", c.Labels[sandbox.LabelManaged] == "1" && c.Labels[sandbox.LabelSandbox] == req.ID &&
				c.Labels[sandbox.LabelWorkspace] == "ws_iso" && c.Labels[LabelBackend] == f.name, c.Labels)
			check("runtime", h.Runtime == f.runtime, h.Runtime)
			check("network", h.NetworkMode == "none" && c.NetworkDisabled, []any{h.NetworkMode, c.NetworkDisabled})
			// Only what the guest needs to become its user and run
			// commands as the sandbox user (which get none).
			check("capabilities", slices.Equal(slices.Sorted(slices.Values(h.CapAdd)), []string{"CAP_KILL", "CAP_SETGID", "CAP_SETPCAP", "CAP_SETUID"}) &&
				slices.Equal(h.CapDrop, []string{"ALL"}), [][]string{h.CapAdd, h.CapDrop})
			// no-new-privileges, and no seccomp= option: Docker's default
			// profile applies.
			check("security options", slices.Equal(h.SecurityOpt, []string{"no-new-privileges"}), h.SecurityOpt)
			check("read-only root", h.ReadonlyRootfs, h.ReadonlyRootfs)
			check("unprivileged", !h.Privileged, h.Privileged)
			check("no docker-init", h.Init != nil && !*h.Init, h.Init)
			check("private namespaces", h.PidMode == "" && h.IpcMode == "private" && h.UTSMode == "" && h.UsernsMode == "" && h.CgroupnsMode == "private",
				[]string{h.PidMode, h.IpcMode, h.UTSMode, h.UsernsMode, h.CgroupnsMode})
			check("tmpfs", h.Tmpfs["/tmp"] == fmt.Sprintf("rw,nosuid,nodev,exec,size=%d,mode=1777", 7<<20) && len(h.Tmpfs) == 1, h.Tmpfs)
			check("memory without swap", h.Memory == 200<<20 && h.MemorySwap == h.Memory, []int64{h.Memory, h.MemorySwap})
			check("cpus", h.NanoCpus == 5e8, h.NanoCpus)
			check("pids", h.PidsLimit != nil && *h.PidsLimit == 321, h.PidsLimit)
			targets := map[string]bool{}
			for _, m := range h.Mounts {
				targets[m.Target] = true
				check("bind "+m.Target, m.Type == "bind" && m.BindOptions != nil && m.BindOptions.Propagation == "rprivate", m)
				switch m.Target {
				case sandbox.GuestPath:
					check("guest mount", m.Source == guestBin && m.ReadOnly, m)
				case sandbox.RunDir:
					// Read-only: the guest only connects to the socket there.
					check("run dir mount", m.Source == runDir && m.ReadOnly, m)
				case sandbox.WorkspaceDir:
					// t.TempDir is not on a nosuid,nodev mount: the backend's
					// own bind of it is what the sandbox gets.
					check("workspace mount", strings.HasPrefix(m.Source, b.mountDir+"/"+req.ID+"/") && !m.ReadOnly, m)
				case "/etc/hostname", "/etc/hosts", "/etc/resolv.conf":
					// The backend's own, from a tmpfs that has left the
					// host since the container started.
					_, err := os.Lstat(m.Source)
					check("/etc file mount", m.Source == filepath.Join(b.mountDir, req.ID, etcName, filepath.Base(m.Target)) && m.ReadOnly &&
						errors.Is(err, os.ErrNotExist), m)
				default:
					// gVisor's extra device nodes, masked.
					fi, err := os.Stat(m.Source)
					check("mask of "+m.Target, b.runtime == RuntimeRunsc && slices.Contains(gvisorExtraDevices, m.Target) && m.ReadOnly &&
						err == nil && isMask(fi), m)
				}
			}
			want := 3 + len(hostbind.EtcFiles)
			if b.runtime == RuntimeRunsc {
				want += len(gvisorExtraDevices)
			}
			check("mounts", len(h.Mounts) == want && len(targets) == want, h.Mounts)
		})
	}
}

// TestNosuidNodevSourceIsBoundAsIs: a workspace already on a nosuid,nodev
// mount (as the overlay driver makes) needs no bind of the backend's own.
func TestNosuidNodevSourceIsBoundAsIs(t *testing.T) {
	if os.Geteuid() != 0 {
		backendtest.SkipOrFail(t, "mounting a tmpfs needs root")
	}
	b, err := New(Options{Name: NameDocker, Runtime: RuntimeRunc, MountDir: filepath.Join(t.TempDir(), "binds")})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "nosuid,nodev,size=1m", "tmpfs", dir).CombinedOutput(); err != nil {
		t.Fatalf("mount: %v %s", err, out)
	}
	defer exec.Command("umount", dir).Run()
	src, release, err := b.workspaceSource("sb_x", dir)
	if err != nil || src != dir {
		t.Fatalf("workspaceSource = %q, %v; want %q", src, err, dir)
	}
	release()
	if _, err := os.Stat(b.mountDir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a bind directory was made for a nosuid,nodev source: %v", err)
	}
	// And a plain directory gets a nosuid,nodev bind that release removes.
	plain := t.TempDir()
	src, release, err = b.workspaceSource("sb_y", plain)
	if err != nil {
		t.Fatal(err)
	}
	if flags := mountFlags(t, src); !strings.Contains(flags, "nosuid") || !strings.Contains(flags, "nodev") {
		t.Errorf("the backend's bind of %s is mounted %s", plain, flags)
	}
	if err := release(); err != nil {
		t.Fatal(err)
	}
	if left, _ := mountinfo.Under(b.mountDir); len(left) != 0 {
		t.Errorf("release left %v", left)
	}
	if _, err := os.Stat(filepath.Join(b.mountDir, "sb_y")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("release left the bind directory: %v", err)
	}
}

// mountFlags returns the per-mount options of the mount at point.
func mountFlags(t *testing.T, point string) string {
	t.Helper()
	data, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	flags := ""
	for _, line := range strings.Split(string(data), "\n") {
		if f := strings.Fields(line); len(f) > 5 && mountinfo.Unescape(f[4]) == point {
			flags = f[5]
		}
	}
	return flags
}

// TestForeignContainer: a container agentbox did not make (or the other
// backend's) is not found, and Remove leaves it alone.
func TestForeignContainer(t *testing.T) {
	t.Parallel()
	requireEngine(t, RuntimeRunc)
	out, err := exec.Command("docker", "create", "--network=none", "--label", sandbox.LabelSandbox+"=sb_foreign", testImage, "true").Output()
	if err != nil {
		t.Fatal(err)
	}
	id := strings.TrimSpace(string(out))
	defer exec.Command("docker", "rm", "-f", id).Run()
	for _, f := range flavours {
		b, err := New(Options{Name: f.name, Runtime: f.runtime})
		if err != nil {
			t.Fatal(err)
		}
		defer b.Close()
		if _, err := b.Inspect(t.Context(), id); !errors.Is(err, errdefs.ErrNotFound) {
			t.Errorf("%s: Inspect of a foreign container: %v, want ErrNotFound", f.name, err)
		}
		if err := b.Remove(t.Context(), id); err == nil {
			t.Errorf("%s: Remove of a foreign container succeeded", f.name)
		}
		for _, op := range []func(context.Context, string) error{b.Stop, b.Pause, b.Resume} {
			if err := op(t.Context(), id); !errors.Is(err, errdefs.ErrNotFound) {
				t.Errorf("%s: an operation on a foreign container: %v", f.name, err)
			}
		}
		if list, err := b.List(t.Context(), map[string]string{sandbox.LabelSandbox: "sb_foreign"}); err != nil || len(list) != 0 {
			t.Errorf("%s: List shows a foreign container: %+v %v", f.name, list, err)
		}
	}
	if err := exec.Command("docker", "inspect", id).Run(); err != nil {
		t.Errorf("the foreign container is gone: %v", err)
	}
}

// TestUnreachableEngine: every call reports ErrUnavailable, and Create
// leaves no workspace bind behind.
func TestUnreachableEngine(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	mountDir := filepath.Join(t.TempDir(), "binds")
	b, err := New(Options{Name: NameDocker, Runtime: RuntimeRunc, Host: "unix://" + filepath.Join(t.TempDir(), "no-engine.sock"),
		MountDir: mountDir})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if _, err := b.List(ctx, nil); !errors.Is(err, errdefs.ErrUnavailable) {
		t.Errorf("List: %v, want ErrUnavailable", err)
	}
	if _, err := b.Inspect(ctx, "abc"); !errors.Is(err, errdefs.ErrUnavailable) {
		t.Errorf("Inspect: %v, want ErrUnavailable", err)
	}
	if os.Geteuid() == 0 {
		req := sandbox.CreateRequest{ID: "sb_unreach", WorkspaceID: "ws_1", Files: t.TempDir(), RunDir: t.TempDir(), Guest: os.Args[0],
			GuestEnv: []string{guest.TokenEnv + "=0123456789abcdef"},
			UID:      1000, GID: 1000, Spec: sandbox.Spec{Image: testImage}}
		if _, err := b.Create(ctx, req); !errors.Is(err, errdefs.ErrUnavailable) {
			t.Errorf("Create: %v, want ErrUnavailable", err)
		}
		if left, _ := mountinfo.Under(mountDir); len(left) != 0 {
			t.Errorf("a failed Create left binds %v", left)
		}
		if _, err := os.Stat(filepath.Join(mountDir, "sb_unreach")); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("a failed Create left its bind directory: %v", err)
		}
	}
}

// TestFailedStartRollsBack: a container that cannot start (the guest is
// not executable) is removed, and so is the workspace bind made for it.
func TestFailedStartRollsBack(t *testing.T) {
	t.Parallel()
	for _, f := range flavours {
		t.Run(f.name, func(t *testing.T) {
			t.Parallel()
			b := newBackend(t, f.name, f.runtime)
			notExec := filepath.Join(t.TempDir(), "guest")
			if err := os.WriteFile(notExec, []byte("not a program\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			req := sandbox.CreateRequest{ID: "sb_fail" + randID(), WorkspaceID: "ws_fail", Files: t.TempDir(), RunDir: t.TempDir(),
				Guest: notExec, GuestEnv: []string{guest.TokenEnv + "=0123456789abcdef"}, UID: 1000, GID: 1000, Spec: sandbox.Spec{Image: testImage}}
			_, err := b.Create(t.Context(), req)
			if err == nil {
				t.Fatal("Create with a guest that cannot run succeeded")
			}
			t.Logf("%s: %v", f.name, err)
			if !strings.Contains(err.Error(), req.ID) {
				t.Errorf("the error does not name the sandbox: %v", err)
			}
			out, err := exec.Command("docker", "ps", "-aq", "--filter", "label="+sandbox.LabelSandbox+"="+req.ID).Output()
			if err != nil || len(bytes.TrimSpace(out)) != 0 {
				t.Errorf("containers left: %q %v", out, err)
			}
			if _, err := os.Stat(filepath.Join(b.mountDir, req.ID)); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("the workspace bind directory is left: %v", err)
			}
		})
	}
}

func randID() string {
	b := make([]byte, 4)
	rand.Read(b)
	return hex.EncodeToString(b)
}
