package battery

import (
	"bufio"
	"context"
	"encoding/json"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentbox/agentbox/internal/guest"
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
		x := e.newBox(t, sandbox.Limits{})
		t.Run("H44 commands", func(t *testing.T) { testGuestChannel(t, x) })
		t.Run("H44 refusals recorded", func(t *testing.T) { testGuestRefusals(t, x) })
	})
}

func testGuestChannel(t *testing.T, x *box) {
	ctlOut, ctlSock := guestchanControl()
	ctl := kv(ctlOut)
	if ctl["connect "+ctlSock] != "0" {
		t.Errorf("control: connecting to a socket open to all fails: %q (%s)", ctl["connect "+ctlSock], ctlSock)
	}
	for _, k := range guestchanMust {
		if ctl["child:"+k] != "0" {
			t.Errorf("control: %s against the probe's own child: %q, want 0: the probe cannot work", k, ctl["child:"+k])
		}
	}
	if !anyKey(ctl, "child:open_fd", "0") {
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
	for _, label := range labels {
		for _, k := range guestchanMust {
			if v, ok := got[label+":"+k]; !ok {
				t.Errorf("%s against the guest (%s): no result", k, label)
			} else if v == "0" || strings.HasPrefix(v, "0 ") {
				t.Errorf("%s against the guest (%s) succeeded", k, label)
			}
		}
		for k, v := range got {
			if (strings.HasPrefix(k, label+":open_fd") || strings.HasPrefix(k, label+":readlink_fd")) && (v == "0" || strings.HasPrefix(v, "0 ")) {
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
	if _, ok := got["connect "+guest.DefaultSocketPath]; !ok || sockets < 2 {
		t.Errorf("the probe tried %d sockets, not the control socket %s: %q", sockets, guest.DefaultSocketPath, out)
	}
	// The shell's own kill, as a command would use it.
	_, out, _ = x.sh(t, `for s in STOP TERM KILL; do kill -s $s "$1" 2>/dev/null; echo "kill_$s=$?"; done`, strconv.Itoa(pid))
	for k, v := range kv(out) {
		if v == "0" {
			t.Errorf("sh: %s of the guest (pid %d) succeeded", k, pid)
		}
	}
	x.mustStillWork(t, pid)
}

// testGuestRefusals connects to the sandbox's control socket from the
// host the ways a process that is not the guest would: nothing, a frame
// that is not a hello, a hello with a wrong token. Each is refused, and
// recorded in the event log with the sandbox's id and in the log.
func testGuestRefusals(t *testing.T, x *box) {
	sock := filepath.Join(x.e.data, "sandboxes", x.sb.ID, "run", "agentbox.sock")
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

// anyKey says whether some key with prefix has value v.
func anyKey(m map[string]string, prefix, v string) bool {
	for k, got := range m {
		if strings.HasPrefix(k, prefix) && got == v {
			return true
		}
	}
	return false
}
