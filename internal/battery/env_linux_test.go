package battery

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/agentbox/agentbox/internal/backend/docker"
	"github.com/agentbox/agentbox/internal/backend/kubernetes"
	"github.com/agentbox/agentbox/internal/backend/local"
	"github.com/agentbox/agentbox/internal/egress"
	"github.com/agentbox/agentbox/internal/egress/mitm"
	"github.com/agentbox/agentbox/internal/guest"
	"github.com/agentbox/agentbox/internal/manager"
	"github.com/agentbox/agentbox/internal/mountinfo"
	"github.com/agentbox/agentbox/internal/sandbox"
	"github.com/agentbox/agentbox/internal/sandbox/backendtest"
	"github.com/agentbox/agentbox/internal/secrets"
	"github.com/agentbox/agentbox/internal/store"
	"github.com/agentbox/agentbox/internal/store/sqlstore"
	"github.com/agentbox/agentbox/internal/testutil"
	"github.com/agentbox/agentbox/internal/testutil/syncbuf"
	"github.com/agentbox/agentbox/internal/workspace"
)

// The sandbox user, as the daemon's default configuration has it.
const (
	sandboxUID = 1000
	sandboxGID = 1000
)

const testImage = "agentbox/busybox:latest"

// diskQuota is every battery workspace's disk quota (SECURITY.md F38).
const diskQuota = 64 << 20

// probePath is where each workspace holds the probe, as the sandbox sees it.
const (
	probeName = ".battery-probe"
	probePath = sandbox.WorkspaceDir + "/" + probeName
)

// backends are the backends every test runs against.
var backends = []string{docker.NameDocker, docker.NameGVisor, local.Name}

// withKubernetes are backends and kubernetes: the sections of the battery
// that run on the test cluster's pods too (network, privilege and file
// system).
var withKubernetes = append(append([]string{}, backends...), kubernetes.Name)

// forEachBackend runs f as a parallel subtest per backend, each with an
// environment of its own.
func forEachBackend(t *testing.T, f func(t *testing.T, e *env)) {
	t.Helper()
	forBackends(t, backends, f)
}

// forBackends is forEachBackend over the named backends.
func forBackends(t *testing.T, names []string, f func(t *testing.T, e *env)) {
	t.Helper()
	requireSetup(t)
	for _, name := range names {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			f(t, newEnv(t, name))
		})
	}
}

// env is one backend behind a real manager: its own data dir, SQLite
// database, overlay workspaces of a real repository, and JSON log.
type env struct {
	t    *testing.T
	name string
	be   sandbox.Backend
	// cgroupParent is the local backend's cgroup parent.
	cgroupParent string
	data         string
	st           store.Store
	m            *manager.Manager
	repo         store.Repo
	// log is what the manager logged, as the daemon logs it (JSON).
	log *syncBuffer
	// names is the egress proxy's resolver: test names to loopback
	// upstreams, and a record of every name the proxy looked up.
	names *fakeResolver
	// upstreamCA signs the TLS upstreams' certificates; the egress proxy
	// verifies intercepted upstreams against it, and only it.
	upstreamCA *mitm.CA
}

func newEnv(t *testing.T, name string) *env {
	t.Helper()
	e := &env{t: t, name: name, data: t.TempDir(), log: &syncBuffer{}, names: &fakeResolver{}}
	if _, err := exec.LookPath("git"); err != nil {
		backendtest.SkipOrFail(t, "git is not installed")
	}
	if err := workspace.ProbeOverlay(t.TempDir()); err != nil {
		backendtest.SkipOrFail(t, "overlay mounts do not work here: "+err.Error())
	}
	switch name {
	case docker.NameDocker, docker.NameGVisor:
		runtime := docker.RuntimeRunc
		if name == docker.NameGVisor {
			runtime = docker.RuntimeRunsc
		}
		requireEngine(t, runtime)
		b, err := docker.New(docker.Options{Name: name, Runtime: runtime, MountDir: filepath.Join(e.data, "binds")})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { b.Close() })
		e.be = b
	case kubernetes.Name:
		kubeconfig := testutil.KubeCluster(t)
		ns := "abbattery-" + randHex(4)
		b, err := kubernetes.New(t.Context(), kubernetes.Options{Kubeconfig: kubeconfig, Namespace: ns,
			MountDir: filepath.Join(e.data, "binds"), RequireNode: true, StopTimeout: 2 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			b.Client().CoreV1().Namespaces().Delete(context.Background(), ns, metav1.DeleteOptions{})
		})
		e.be = b
	case local.Name:
		if _, err := exec.LookPath("bwrap"); err != nil {
			backendtest.SkipOrFail(t, "bubblewrap is not installed")
		}
		if err := localImagesErr(); err != nil {
			t.Fatalf("building the local busybox root file system: %v", err)
		}
		e.cgroupParent = "agentbox-battery-" + randHex(4)
		b, err := local.New(local.Options{StateDir: filepath.Join(e.data, "local"), ImagesDir: imagesDir, CgroupParent: e.cgroupParent})
		if err != nil {
			backendtest.SkipOrFail(t, "local backend: "+err.Error())
		}
		t.Cleanup(func() {
			if err := b.Close(); err != nil {
				t.Errorf("closing the local backend: %v", err)
			}
			for _, c := range []string{"memory", "pids", "cpu", "freezer", "cpuacct", "cpu,cpuacct"} {
				os.Remove(filepath.Join("/sys/fs/cgroup", c, e.cgroupParent))
			}
			os.Remove(filepath.Join("/sys/fs/cgroup", e.cgroupParent))
		})
		e.be = b
	default:
		t.Fatalf("unknown backend %s", name)
	}
	st, err := sqlstore.Open(context.Background(), filepath.Join(e.data, "agentbox.db"))
	if err != nil {
		t.Fatal(err)
	}
	e.st = st
	// The upstreams live on 127.0.0.1 and nowhere else: that one address
	// is let through, every other refusal stays.
	var mgr atomic.Pointer[manager.Manager]
	// Secrets as the daemon has them: a sealed store and an interception
	// CA in the data dir; upstreams' certificates come from another CA.
	box, err := secrets.Open(e.data, st)
	if err != nil {
		t.Fatal(err)
	}
	ca, err := mitm.LoadOrCreateCA(filepath.Join(e.data, "ca"))
	if err != nil {
		t.Fatal(err)
	}
	if e.upstreamCA, err = mitm.LoadOrCreateCA(t.TempDir()); err != nil {
		t.Fatal(err)
	}
	upRoots := x509.NewCertPool()
	upRoots.AppendCertsFromPEM(e.upstreamCA.CertPEM())
	proxy := egress.New(egress.Options{
		UpstreamTLS: &tls.Config{RootCAs: upRoots},
		Resolver:    e.names,
		AllowAddr:   func(a netip.Addr) bool { return a == netip.AddrFrom4([4]byte{127, 0, 0, 1}) },
		OnDecision: func(d egress.Decision) {
			if m := mgr.Load(); m != nil {
				m.RecordEgress(manager.EgressDecision(d))
			}
		},
	})
	m, err := manager.New(context.Background(), st, manager.Config{
		DataDir: e.data, Driver: workspace.Overlay, UID: sandboxUID, GID: sandboxGID, DiskQuota: diskQuota,
		Logger:   slog.New(slog.NewJSONHandler(e.log, &slog.HandlerOptions{Level: slog.LevelDebug})),
		Backends: map[string]sandbox.Backend{name: e.be}, DefaultBackend: name, DefaultImage: testImage, GuestBinary: guestBin,
		Egress: proxy, Secrets: box, CABundle: ca.CertPEM(),
		Intercept: func(allow manager.Allowlist, bound []manager.BoundSecret) (manager.Allowlist, map[string]string, error) {
			s := make([]mitm.Secret, len(bound))
			for i, b := range bound {
				s[i] = mitm.Secret(b)
			}
			return mitm.Wrap(ca, allow, s)
		},
	})
	if err != nil {
		st.Close()
		t.Fatal(err)
	}
	e.m = m
	mgr.Store(m)
	t.Cleanup(e.cleanup)
	src := testutil.NewRepo(t, map[string]string{"README.md": "battery\n", "src/main.go": "package main\n"})
	if e.repo, _, err = m.AddRepo(t.Context(), src.Dir, nil); err != nil {
		t.Fatal(err)
	}
	return e
}

// cleanup removes every workspace (and so every sandbox) through the
// manager, then checks that the engine holds nothing of them.
func (e *env) cleanup() {
	t := e.t
	ctx := context.Background()
	sbs, _ := e.st.ListSandboxes(ctx, store.SandboxFilter{})
	wss, _ := e.st.ListWorkspaces(ctx, "")
	for _, w := range wss {
		if err := e.m.RemoveWorkspace(ctx, w.ID); err != nil {
			t.Errorf("cleanup: removing workspace %s: %v", w.ID, err)
		}
	}
	e.st.Close()
	for _, sb := range sbs {
		left, _ := e.be.List(ctx, map[string]string{sandbox.LabelSandbox: sb.ID})
		for _, in := range left {
			t.Errorf("cleanup: sandbox %s: environment %s (%s) left behind", sb.ID, in.Ref, in.State)
			e.be.Remove(ctx, in.Ref)
		}
	}
	left, _ := mountinfo.Under(e.data)
	for i := len(left) - 1; i >= 0; i-- {
		t.Errorf("cleanup: mount %s left behind", left[i])
		unix.Unmount(left[i], unix.MNT_DETACH)
	}
	if t.Failed() {
		t.Logf("manager log:\n%s", tail(e.log.String(), 4000))
	}
}

// requireEngine skips (or fails under AGENTBOX_REQUIRE_SETUP=1) unless the
// docker CLI reaches an engine with the runtime and the test image.
func requireEngine(t *testing.T, runtime string) {
	t.Helper()
	if _, err := exec.LookPath("docker"); err != nil {
		backendtest.SkipOrFail(t, "the docker CLI is not installed")
	}
	out, err := exec.Command("docker", "info", "--format", "{{json .Runtimes}}").CombinedOutput()
	if err != nil {
		backendtest.SkipOrFail(t, fmt.Sprintf("no Docker engine (run scripts/setup.sh): %v %s", err, bytes.TrimSpace(out)))
	}
	if !bytes.Contains(out, []byte(`"`+runtime+`"`)) {
		backendtest.SkipOrFail(t, "the Docker engine has no "+runtime+" runtime (scripts/setup.sh registers it)")
	}
	if err := exec.Command("docker", "image", "inspect", testImage).Run(); err != nil {
		backendtest.SkipOrFail(t, testImage+" is not in the engine: run agentbox image build --kind busybox")
	}
}

// box is a workspace with a running sandbox and the probe in it.
type box struct {
	e  *env
	ws store.Workspace
	sb store.Sandbox
}

// files is the host path of the workspace's files.
func (x *box) files() string { return x.e.m.FilesPath(x.ws) }

// newBox makes a workspace, puts the probe in it, and starts a sandbox
// with limits (zero: the defaults users get).
func (e *env) newBox(t *testing.T, limits sandbox.Limits) *box {
	t.Helper()
	w, err := e.m.CreateWorkspace(t.Context(), manager.CreateRequest{Repo: e.repo.ID, Task: "battery " + t.Name()})
	if err != nil {
		t.Fatalf("CreateWorkspace: %v", err)
	}
	x := &box{e: e, ws: w}
	copyFile(t, probeBin, filepath.Join(x.files(), probeName), 0o755, sandboxUID, sandboxGID)
	sb, err := e.m.CreateSandbox(t.Context(), w.ID, sandbox.Spec{Limits: limits})
	if err != nil {
		t.Fatalf("CreateSandbox on %s: %v", e.name, err)
	}
	x.sb = sb
	return x
}

// defaultEnv is the environment every command gets unless it names one.
var defaultEnv = []string{"PATH=/usr/local/bin:/usr/bin:/bin", "HOME=/tmp"}

// run runs req through the manager and returns its outcome and output.
func (x *box) run(t *testing.T, req guest.ExecRequest, stdin string) (manager.ExecOutcome, string, string) {
	t.Helper()
	if req.Env == nil {
		req.Env = defaultEnv
	}
	if req.Timeout == 0 {
		req.Timeout = 90 * time.Second
	}
	var out, errOut syncBuffer
	var in io.Reader
	if stdin != "" {
		in = strings.NewReader(stdin)
	}
	ctx, cancel := context.WithTimeout(t.Context(), req.Timeout+30*time.Second)
	defer cancel()
	res, err := x.e.m.Exec(ctx, x.ws.ID, req, in, &out, &errOut)
	if err != nil {
		t.Fatalf("%s: exec %q: %v (%+v)\nstderr: %s", x.e.name, req.Argv, err, res, tail(errOut.String(), 2000))
	}
	if res.Replaced {
		x.sb, _ = x.e.m.GetSandbox(context.Background(), res.SandboxID)
	}
	return res, out.String(), errOut.String()
}

// probe runs the probe with args and returns its stdout; it fails the
// test unless the probe exited 0.
func (x *box) probe(t *testing.T, stdin string, args ...string) string {
	t.Helper()
	res, out, errOut := x.run(t, guest.ExecRequest{Argv: append([]string{probePath}, args...)}, stdin)
	if res.ExitCode != 0 || res.Lost {
		t.Fatalf("%s: probe %v: %+v\nstdout: %s\nstderr: %s", x.e.name, args, res.ExecResult, tail(out, 2000), tail(errOut, 2000))
	}
	return out
}

// sh runs a shell script.
func (x *box) sh(t *testing.T, script string, args ...string) (manager.ExecOutcome, string, string) {
	t.Helper()
	return x.run(t, guest.ExecRequest{Argv: append([]string{"sh", "-c", script, "sh"}, args...)}, "")
}

// ref is the backend's handle of the box's current sandbox.
func (x *box) ref(t *testing.T) string {
	t.Helper()
	sb, err := x.e.m.GetSandbox(context.Background(), x.sb.ID)
	if err != nil {
		t.Fatal(err)
	}
	return sb.BackendRef
}

// hostVisible says whether the sandbox's processes are host processes
// (runc, bubblewrap) or live inside gVisor's sentry, where a host census
// cannot see them.
func (e *env) hostVisible() bool { return e.name != docker.NameGVisor }

// cgroupDir is the host directory of the box's cgroup in a v1 controller.
func (x *box) cgroupDir(t *testing.T, controller string) string {
	t.Helper()
	ref := x.ref(t)
	if x.e.name == local.Name {
		return filepath.Join("/sys/fs/cgroup", controller, x.e.cgroupParent, ref)
	}
	out, err := exec.Command("docker", "inspect", "--format", "{{.State.Pid}}", ref).Output()
	if err != nil {
		t.Fatalf("docker inspect %s: %v", ref, err)
	}
	pid := strings.TrimSpace(string(out))
	b, err := os.ReadFile("/proc/" + pid + "/cgroup")
	if err != nil {
		t.Fatalf("cgroup of the container's init %s: %v", pid, err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) == 3 {
			for _, c := range strings.Split(parts[1], ",") {
				if c == controller {
					return filepath.Join("/sys/fs/cgroup", controller, parts[2])
				}
			}
		}
	}
	t.Fatalf("container %s: no %s cgroup in %s", ref, controller, b)
	return ""
}

// cgroupNum reads one number from a cgroup file.
func cgroupNum(t *testing.T, path string) int64 {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("reading %s: %v", path, err)
	}
	n, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	if err != nil {
		t.Fatalf("%s: %q", path, b)
	}
	return n
}

// throttledPeriods is how many periods the kernel has held the CPU
// cgroup at dir back, its quota used up.
func throttledPeriods(t *testing.T, dir string) int64 {
	t.Helper()
	b, err := os.ReadFile(dir + "/cpu.stat")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "nr_throttled "); ok {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				t.Fatalf("%s/cpu.stat: %q", dir, line)
			}
			return n
		}
	}
	t.Fatalf("%s/cpu.stat has no nr_throttled: %q", dir, b)
	return 0
}

// killFromOutside ends the box's environment as a crash or an operator
// would, without telling the manager: docker rm -f, or SIGKILL to every
// process of the jail's cgroup.
func (x *box) killFromOutside(t *testing.T) {
	t.Helper()
	ref := x.ref(t)
	if x.e.name != local.Name {
		if out, err := exec.Command("docker", "rm", "-f", ref).CombinedOutput(); err != nil {
			t.Fatalf("docker rm -f %s: %v %s", ref, err, out)
		}
		return
	}
	procs := filepath.Join(x.cgroupDir(t, "pids"), "cgroup.procs")
	if !eventually(15*time.Second, func() bool {
		b, err := os.ReadFile(procs)
		if err != nil {
			return true
		}
		pids := strings.Fields(string(b))
		for _, p := range pids {
			if pid, err := strconv.Atoi(p); err == nil {
				syscall.Kill(pid, syscall.SIGKILL)
			}
		}
		return len(pids) == 0
	}) {
		t.Fatalf("the jail %s does not die", ref)
	}
}

// census lists host processes whose command line holds marker.
func census(marker string) []string {
	self := os.Getpid()
	ents, _ := os.ReadDir("/proc")
	var out []string
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == self {
			continue
		}
		cmdline, _ := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		if bytes.Contains(cmdline, []byte(marker)) {
			out = append(out, fmt.Sprintf("%d %s", pid, strings.ReplaceAll(string(bytes.TrimRight(cmdline, "\x00")), "\x00", " ")))
		}
	}
	return out
}

// censusPids lists the pids of host processes whose command line holds
// marker.
func censusPids(marker string) []int {
	var pids []int
	for _, p := range census(marker) {
		f := strings.Fields(p)
		if n, err := strconv.Atoi(f[0]); err == nil {
			pids = append(pids, n)
		}
	}
	return pids
}

// insideCensus lists the processes inside the box whose command line
// holds marker, as the sandbox's /proc shows them (gVisor's processes are
// not host processes). The needle goes through stdin, so the scan does
// not find itself.
func (x *box) insideCensus(t *testing.T, marker string) []string {
	t.Helper()
	res, out, errOut := x.run(t, guest.ExecRequest{Argv: []string{probePath, "scan"}}, marker+"\n")
	if res.ExitCode != 0 {
		t.Fatalf("inside census: %+v %s", res.ExecResult, errOut)
	}
	var found []string
	for _, f := range linesWith(out, "found") {
		if strings.HasPrefix(f[0], "/proc/") && strings.HasSuffix(f[0], "/cmdline") {
			found = append(found, f[0])
		}
	}
	return found
}

// eventually polls cond until it holds or within passes.
func eventually(within time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(within)
	for {
		if cond() {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func credential(uid int) *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(uid), Groups: []uint32{}}}
}

func tail(s string, n int) string {
	if len(s) > n {
		return "..." + s[len(s)-n:]
	}
	return s
}

// syncBuffer is written by one goroutine while the test reads it.
type syncBuffer = syncbuf.Buffer

// errIs reports whether a probe result names one of the errnos.
func errIs(res string, names ...string) bool {
	for _, n := range names {
		if res == n || strings.HasSuffix(res, "_"+n) {
			return true
		}
	}
	return false
}
