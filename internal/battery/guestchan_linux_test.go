package battery

import (
	"bufio"
	"context"
	"encoding/json"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentbox/agentbox/internal/backend/docker"
	"github.com/agentbox/agentbox/internal/backend/local"
	"github.com/agentbox/agentbox/internal/guest"
	"github.com/agentbox/agentbox/internal/manager"
	"github.com/agentbox/agentbox/internal/policy"
	"github.com/agentbox/agentbox/internal/sandbox"
	"github.com/agentbox/agentbox/internal/store"
)

// guestchanControl is the H44 probe's unconfined run on the host, made
// once: as the sandbox user, against a child of its own and a socket
// anyone may connect to, every probe must work.
var guestchanControl = sync.OnceValues(func() (string, string) {
	dir, err := os.MkdirTemp("", "agentbox-battery-h44-")
	if err != nil {
		return "", err.Error()
	}
	defer os.RemoveAll(dir)
	os.Chmod(dir, 0o755)
	sock := filepath.Join(dir, "control.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		return "", err.Error()
	}
	defer ln.Close()
	os.Chmod(sock, 0o666)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	// The sandbox user cannot reach the battery's own (root-only) copy.
	probe := filepath.Join(dir, "probe")
	b, err := os.ReadFile(probeBin)
	if err == nil {
		err = os.WriteFile(probe, b, 0o755)
	}
	if err != nil {
		return "", err.Error()
	}
	cmd := exec.Command(probe, "guestchan", "child", sock)
	cmd.SysProcAttr = credential(sandboxUID)
	out, err := cmd.Output()
	if err != nil {
		return string(out), err.Error()
	}
	return string(out), sock
})

// guestchanMust are the probes of one target that must work in the
// control and fail against the guest.
var guestchanMust = []string{
	"environ", "maps", "smaps", "auxv", "mem", "pagemap", "syscall", "io", "cwd", "root", "exe",
	"readdir_fd", "fdinfo", "ptrace_attach", "ptrace_seize", "process_vm_readv", "pidfd_getfd",
	"kill_0", "pidfd_signal_0", "kill_STOP", "tgkill_STOP", "pidfd_signal_STOP",
	"kill_TERM", "pidfd_signal_TERM", "kill_KILL", "pidfd_signal_KILL",
}

// TestGuestChannel runs SECURITY.md H44 on every backend: a command can
// neither reach the guest's control socket (nor any other socket of the
// run directory) nor open, read, trace or signal anything of the guest,
// and the daemon refuses and records every connection to the control
// socket that is not the guest's.
func TestGuestChannel(t *testing.T) {
	forEachBackend(t, func(t *testing.T, e *env) {
		// With an allowlist, so that the run directory holds the egress
		// socket as well, and the guest's relay to it is exercised.
		pol, err := policy.Parse([]byte("network:\n  mode: allowlist\n  allow: [\"h44.invalid:80\"]\n"))
		if err != nil {
			t.Fatal(err)
		}
		w, err := e.m.CreateWorkspace(t.Context(), manager.CreateRequest{Repo: e.repo.ID, Task: "battery " + t.Name()})
		if err != nil {
			t.Fatal(err)
		}
		x := &box{e: e, ws: w}
		copyFile(t, probeBin, filepath.Join(x.files(), probeName), 0o755, sandboxUID, sandboxGID)
		if x.sb, err = e.m.CreateSandbox(t.Context(), w.ID, sandbox.Spec{Policy: &pol}); err != nil {
			t.Fatalf("CreateSandbox on %s: %v", e.name, err)
		}
		t.Run("H44 commands", func(t *testing.T) { testGuestChannel(t, x) })
		t.Run("H44 refusals recorded", func(t *testing.T) { testGuestRefusals(t, x) })
		t.Run("H44 quiet teardown", func(t *testing.T) { testGuestTeardown(t, x) })
	})
}

func testGuestChannel(t *testing.T, x *box) {
	ctlOut, ctlSock := guestchanControl()
	ctl := kv(ctlOut)
	if ctl["connect "+ctlSock] != "0" {
		t.Errorf("control: connecting to a socket open to all fails: %q (%s)", ctl["connect "+ctlSock], ctlSock)
	}
	for _, k := range guestchanMust {
		if !succeeded(ctl["child:"+k]) {
			t.Errorf("control: %s against the probe's own child: %q, want 0: the probe cannot work", k, ctl["child:"+k])
		}
	}
	if !anyKey(ctl, "child:open_fd") {
		t.Errorf("control: no descriptor of the probe's own child opens: %q", ctlOut)
	}

	pid := x.guestPid(t)
	res, out, errOut := x.run(t, guestExec("guestchan", strconv.Itoa(pid)+",guests,ppid"), "")
	t.Logf("%s: guest pid %d; probe: %+v\n%s", x.e.name, pid, res.ExecResult, out)
	if res.ExitCode != 0 || res.Lost || !strings.Contains(out, "\ndone\n") {
		t.Errorf("the probe did not finish: %+v %s", res.ExecResult, tail(errOut, 2000))
	}
	got := kv(out)
	var labels []string
	for _, f := range linesWith(out, "target") {
		if len(f) == 2 && f[0] != "ppid" {
			labels = append(labels, f[0])
		}
	}
	if len(labels) == 0 {
		t.Fatalf("the probe aimed at no guest: %q", out)
	}
	gaps := x.e.procGaps(t)
	for _, label := range labels {
		for _, k := range guestchanMust {
			v, ok := got[label+":"+k]
			switch {
			case !ok:
				t.Errorf("%s against the guest (%s): no result", k, label)
			case !succeeded(v):
			case gaps[k]:
				t.Logf("%s: %s against the guest (%s) succeeds: a known gap of this runtime (see procGaps)", x.e.name, k, label)
			default:
				t.Errorf("%s against the guest (%s) succeeded", k, label)
			}
		}
		for k, v := range got {
			fd, isOpen := strings.CutPrefix(k, label+":open_fd")
			_, isLink := strings.CutPrefix(k, label+":readlink_fd")
			switch {
			case !isOpen && !isLink, !succeeded(v):
			case isLink && gaps["readdir_fd"]:
			case isOpen && worldOpenable(v):
				// A node any process opens by its own path (/dev/null):
				// nothing of the guest's.
				t.Logf("%s: the guest's fd %s opens, as anyone's would: %s", x.e.name, fd, v)
			default:
				t.Errorf("%s inside: %s: a command reaches the guest's descriptor", k, v)
			}
		}
	}
	// Every socket it found or was told of, the run directory's first.
	sockets := 0
	for k, v := range got {
		if path, ok := strings.CutPrefix(k, "connect "); ok {
			sockets++
			if v == "0" {
				t.Errorf("a command connects to %s", path)
			}
		}
	}
	for _, p := range []string{guest.DefaultSocketPath, guest.DefaultEgressSocketPath} {
		if _, ok := got["connect "+p]; !ok {
			t.Errorf("the probe did not try %s", p)
		}
	}
	if got["connect "+guest.DefaultEgressSocketPath] == "ENOENT" {
		t.Errorf("the sandbox has no egress socket to try")
	}
	// The shell's own kill, as a command would use it.
	_, out, _ = x.sh(t, `for s in STOP TERM KILL; do kill -s $s "$1" 2>/dev/null; echo "kill_$s=$?"; done`, strconv.Itoa(pid))
	for k, v := range kv(out) {
		if v == "0" {
			t.Errorf("sh: %s of the guest (pid %d) succeeded", k, pid)
		}
	}
	x.mustStillWork(t, pid)
	// The guest still relays the proxy to the egress socket, where the
	// policy is enforced.
	if out := x.probe(t, "", "net", "proxy:http://denied.invalid/h44"); !strings.HasPrefix(kv(out)["proxy http://denied.invalid/h44"], "403") {
		t.Errorf("a request through the guest's proxy: %q, want the egress proxy's 403", out)
	}
}

// testGuestRefusals connects to the sandbox's control socket from the
// host the ways a process that is not the guest would: nothing, a frame
// that is not a hello, a hello with a wrong token. Each is refused, and
// recorded in the event log with the sandbox's id and in the log.
func testGuestRefusals(t *testing.T, x *box) {
	sock := x.hostSocket(t)
	hello := guest.Hello{Version: guest.ProtocolVersion, Token: []byte(strings.Repeat("f", 64)), GuestVersion: "battery", Pid: 1}
	attempts := map[string][]byte{
		"silent":      nil,
		"not a hello": guest.AppendFrame(nil, guest.FramePing, 0, make([]byte, 8)),
		"wrong token": guest.AppendFrame(nil, guest.FrameHello, 0, hello.Encode()),
	}
	for what, b := range attempts {
		c, err := net.DialTimeout("unix", sock, 5*time.Second)
		if err != nil {
			t.Fatalf("%s: connecting to %s from the host: %v", what, sock, err)
		}
		if b != nil {
			c.Write(b)
		}
		if what == "silent" {
			c.Close()
			continue
		}
		// The daemon answers with an error frame or hangs up; it must
		// never say hello-ok.
		c.SetReadDeadline(time.Now().Add(10 * time.Second))
		f, err := guest.ReadFrame(bufio.NewReader(c))
		if err == nil && f.Type == guest.FrameHelloOK {
			t.Errorf("%s: the daemon accepted the connection", what)
		}
		c.Close()
	}
	var evs []store.Event
	if !eventually(15*time.Second, func() bool {
		evs, _ = x.e.st.ListEvents(context.Background(), store.EventFilter{SandboxID: x.sb.ID, Type: "guest.refused"})
		return len(evs) >= len(attempts)
	}) {
		t.Errorf("%d guest.refused events for sandbox %s, want %d: %+v", len(evs), x.sb.ID, len(attempts), evs)
	}
	for _, ev := range evs {
		var d map[string]any
		if err := json.Unmarshal([]byte(ev.Detail), &d); err != nil || d["reason"] == nil {
			t.Errorf("event %d: detail %q has no reason", ev.ID, ev.Detail)
		}
	}
	lines := 0
	for _, line := range strings.Split(x.e.log.String(), "\n") {
		if strings.Contains(line, `"guest connection refused"`) && strings.Contains(line, `"sandbox_id":"`+x.sb.ID+`"`) {
			lines++
		}
	}
	if lines < len(attempts) {
		t.Errorf("%d log lines say a guest connection of sandbox %s was refused, want %d", lines, x.sb.ID, len(attempts))
	}
	x.mustStillWork(t, x.guestPid(t))
}

// testGuestTeardown stops the box's sandbox: the guest, whose connection
// the daemon closes, dials again until it dies, and no refusal may come of
// that (a guest.refused event is an anomaly, not the noise of every stop).
func testGuestTeardown(t *testing.T, x *box) {
	refused := func() int {
		evs, err := x.e.st.ListEvents(context.Background(), store.EventFilter{SandboxID: x.sb.ID, Type: "guest.refused"})
		if err != nil {
			t.Fatal(err)
		}
		return len(evs)
	}
	before := refused()
	if _, err := x.e.m.StopSandbox(t.Context(), x.sb.ID); err != nil {
		t.Fatal(err)
	}
	time.Sleep(1500 * time.Millisecond) // past the guest's longest backoff
	if n := refused(); n != before {
		t.Errorf("stopping the sandbox recorded %d guest.refused events", n-before)
	}
}

// hostSocket is the path through which the host reaches the box's control
// socket: the daemon takes a run directory off the host once the sandbox
// holds it (see the manager's hideHostPaths), so it is the path inside a
// host process that sees the sandbox's mounts. Under runc that is the
// container's init, under bubblewrap any process of the jail, under gVisor
// the sandbox's gofer (its sentry sees no host file).
func (x *box) hostSocket(t *testing.T) string {
	t.Helper()
	ref := x.ref(t)
	var pids []int
	if x.e.name == local.Name {
		b, err := os.ReadFile(filepath.Join(x.cgroupDir(t, "pids"), "cgroup.procs"))
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range strings.Fields(string(b)) {
			if pid, err := strconv.Atoi(f); err == nil {
				pids = append(pids, pid)
			}
		}
	} else {
		out, err := exec.Command("docker", "inspect", "--format", "{{.State.Pid}}", ref).Output()
		if err != nil {
			t.Fatalf("docker inspect %s: %v", ref, err)
		}
		if pid, err := strconv.Atoi(strings.TrimSpace(string(out))); err == nil {
			pids = append(pids, pid)
		}
		pids = append(pids, censusPids(ref)...)
	}
	for _, pid := range pids {
		p := "/proc/" + strconv.Itoa(pid) + "/root" + guest.DefaultSocketPath
		if fi, err := os.Stat(p); err == nil && fi.Mode()&fs.ModeSocket != 0 {
			return p
		}
	}
	t.Fatalf("no process of sandbox %s (%v) shows its control socket", x.sb.ID, pids)
	return ""
}

// guestPid is the pid of the box's guest inside its sandbox, as its hello
// told the daemon.
func (x *box) guestPid(t *testing.T) int {
	t.Helper()
	for _, line := range strings.Split(x.e.log.String(), "\n") {
		var rec struct {
			Msg       string `json:"msg"`
			SandboxID string `json:"sandbox_id"`
			GuestPid  *int   `json:"guest_pid"`
		}
		if json.Unmarshal([]byte(line), &rec) == nil && rec.Msg == "guest connected" && rec.SandboxID == x.sb.ID && rec.GuestPid != nil {
			return *rec.GuestPid
		}
	}
	t.Fatalf("no guest connected line for sandbox %s in the log", x.sb.ID)
	return 0
}

// mustStillWork checks that the box's sandbox survived: the same one
// runs a command, and its guest is the one that connected first.
func (x *box) mustStillWork(t *testing.T, pid int) {
	t.Helper()
	res, out, _ := x.sh(t, "echo alive")
	if out != "alive\n" || res.ExitCode != 0 || res.Replaced || res.SandboxID != x.sb.ID {
		t.Errorf("the sandbox does not keep working: %+v %q (was %s)", res, out, x.sb.ID)
	}
	if strings.Contains(x.e.log.String(), `"guest connection ended"`) {
		t.Errorf("the guest's connection ended")
	}
	if got := x.guestPid(t); got != pid {
		t.Errorf("the guest is pid %d, was %d", got, pid)
	}
}

// guestExec is the probe with args, as a request.
func guestExec(args ...string) guest.ExecRequest {
	return guest.ExecRequest{Argv: append([]string{probePath}, args...), Timeout: 60 * time.Second}
}

// anyKey says whether some key with prefix has a result that succeeded.
func anyKey(m map[string]string, prefix string) bool {
	for k, got := range m {
		if strings.HasPrefix(k, prefix) && succeeded(got) {
			return true
		}
	}
	return false
}

// succeeded says whether a guestchan result is a success: "0", or "0 "
// and what was reached.
func succeeded(v string) bool { return v == "0" || strings.HasPrefix(v, "0 ") }

// worldOpenable says whether an opened descriptor (the probe's "0 KIND
// MODE") is a character device that every user may read and write.
func worldOpenable(v string) bool {
	f := strings.Fields(v)
	if len(f) != 3 || f[1] != "chr" {
		return false
	}
	mode, err := strconv.ParseUint(f[2], 8, 32)
	return err == nil && mode&0o006 == 0o006
}

// gvisorProcFixed is the first gVisor release whose /proc/PID/environ,
// auxv, maps and smaps, and fd directory, are closed to a process that
// may not trace the owner, as Linux's are (upstream 561ff6d23, "proc: fix
// security checks on /proc/pid files").
const gvisorProcFixed = 20251215

// procGaps are the H44 probes that this environment's runtime answers for
// any process whoever asks, so that no user or dumpability setting of the
// guest can close them. Every gVisor release lists /proc/PID/fdinfo (mode
// 0555, no ptrace check); those before gvisorProcFixed also serve
// environ, auxv, maps and smaps (mode 0444) and the fd directory (0555).
// What they show of the guest is its layout and its descriptor table: its
// environment holds no token (it re-executes without it, see
// initd.TakeToken), and none of those descriptors opens (checked above).
func (e *env) procGaps(t *testing.T) map[string]bool {
	if e.name != docker.NameGVisor {
		return nil
	}
	gaps := map[string]bool{"fdinfo": true}
	if release := runscRelease(t); release < gvisorProcFixed {
		t.Logf("runsc of release %d, before %d: its /proc is open to all", release, gvisorProcFixed)
		for _, k := range []string{"environ", "auxv", "maps", "smaps", "readdir_fd"} {
			gaps[k] = true
		}
	}
	return gaps
}

// runscRelease is the release date (YYYYMMDD) of the runsc the engine runs
// gvisor sandboxes with, which need not be the one on PATH.
func runscRelease(t *testing.T) int {
	out, err := exec.Command("docker", "info", "--format", "{{json .Runtimes}}").Output()
	if err != nil {
		t.Fatalf("docker info: %v", err)
	}
	var runtimes map[string]struct {
		Path string `json:"path"`
	}
	if err := json.Unmarshal(out, &runtimes); err != nil || runtimes["runsc"].Path == "" {
		t.Fatalf("the engine's runtimes %s: no runsc (%v)", out, err)
	}
	path := runtimes["runsc"].Path
	if out, err = exec.Command(path, "--version").Output(); err != nil {
		t.Fatalf("%s --version: %v", path, err)
	}
	// Debian's "0.0~20221219.0", a release's "release-20251215.0", a
	// build's Go pseudo-version "v0.0.0-20260905035102-160fafc42237".
	m := regexp.MustCompile(`(?:~|release-|v0\.0\.0-)(\d{8})`).FindSubmatch(out)
	if m == nil {
		t.Fatalf("%s --version: no release date in %q", path, out)
	}
	v, _ := strconv.Atoi(string(m[1]))
	return v
}
