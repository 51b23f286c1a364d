package battery

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/creack/pty"
	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/internal/apitypes"
	"github.com/agentbox/agentbox/internal/backend/kubernetes"
	"github.com/agentbox/agentbox/internal/backend/local"
)

// testPTY (A9) holds the sandbox's terminals to the host's view: while a
// command runs on a terminal, no host process of the sandbox (the
// container's or jail's processes, gVisor's sentry and gofer) holds a
// terminal of the host's devpts, the host's console or a virtual
// terminal, and where the sandbox's processes are host processes, the
// command's stdin, stdout and stderr are a terminal of the sandbox's own
// devpts. A control first: the detector flags a terminal of the host's
// devpts held by this process.
func testPTY(t *testing.T, x *box) {
	hostPts, err := os.Stat("/dev/pts")
	if err != nil {
		t.Fatalf("the host has no /dev/pts to compare with: %v", err)
	}
	hostDev := hostPts.Sys().(*syscall.Stat_t).Dev
	master, slave, err := pty.Open()
	if err != nil {
		t.Fatalf("control: opening a terminal on the host: %v", err)
	}
	found := hostTerminals(os.Getpid(), hostDev)
	master.Close()
	slave.Close()
	if len(found) == 0 {
		t.Fatalf("control: the detector does not see the host terminal this process holds")
	}

	marker := "battery-pty-" + randHex(4)
	ctx := context.Background()
	p, err := x.e.m.StartProcess(ctx, x.ws.ID, apitypes.ExecRequest{TTY: true, Cols: 90, Rows: 30, Env: defaultEnv,
		Argv: []string{"sh", "-c", `t=$(tty); echo "tty $t $(stat -c %d "$t") $(stat -c %d /dev/pts)"; exec "$0" hold "$1"`, probePath, marker}})
	if err != nil {
		t.Fatalf("starting a command on a terminal: %v", err)
	}
	defer x.e.m.SignalProcess(ctx, x.ws.ID, p.ID, apitypes.ProcessSignal{Signal: "KILL"})
	var shown string
	if !eventually(15*time.Second, func() bool {
		l, err := x.e.m.ProcessLogs(ctx, x.ws.ID, p.ID, apitypes.LogQuery{})
		shown = string(l.Bytes())
		return err == nil && strings.Contains(shown, "ready")
	}) {
		t.Fatalf("the command on a terminal did not get ready: %q", shown)
	}
	// What the sandbox says: its terminal is on its own /dev/pts.
	if f := strings.Fields(shown); len(f) < 4 || f[0] != "tty" || !strings.HasPrefix(f[1], "/dev/pts/") || f[2] != f[3] {
		t.Errorf("inside, the terminal is not on the sandbox's /dev/pts: %q", shown)
	}

	pids := x.hostPids(t)
	if len(pids) == 0 {
		t.Fatalf("no host process of sandbox %s found: the probe cannot work", x.sb.ID)
	}
	for _, pid := range pids {
		for _, f := range hostTerminals(pid, hostDev) {
			t.Errorf("host process %d of the sandbox holds %s", pid, f)
		}
	}
	if !x.e.hostVisible() {
		t.Logf("%s: %d host processes, none holding a host terminal", x.e.name, len(pids))
		return
	}
	held := censusPids(marker)
	if len(held) == 0 {
		t.Fatalf("the held command %s does not show in the host's process table", marker)
	}
	root := fmt.Sprintf("/proc/%d/root/dev/pts", held[0])
	own, err := os.Stat(root)
	if err != nil {
		t.Fatalf("the sandbox's /dev/pts from the host: %v", err)
	}
	ownDev := own.Sys().(*syscall.Stat_t).Dev
	if ownDev == hostDev {
		t.Errorf("the sandbox's /dev/pts is the host's devpts (device %d)", hostDev)
	}
	var term string
	for fd := 0; fd <= 2; fd++ {
		fi, err := os.Stat(fmt.Sprintf("/proc/%d/fd/%d", held[0], fd))
		if err != nil {
			t.Errorf("fd %d of the held command: %v", fd, err)
			continue
		}
		st := fi.Sys().(*syscall.Stat_t)
		if fi.Mode()&os.ModeCharDevice == 0 || !isPTSMajor(unix.Major(st.Rdev)) || st.Dev != ownDev {
			t.Errorf("fd %d of the command on a terminal is %v, device %d:%d on filesystem %d; want a terminal of the sandbox's devpts (%d)",
				fd, fi.Mode(), unix.Major(st.Rdev), unix.Minor(st.Rdev), st.Dev, ownDev)
		}
		term = fmt.Sprintf("%d:%d", unix.Major(st.Rdev), unix.Minor(st.Rdev))
	}
	t.Logf("%s: the command's terminal is %s on the sandbox's devpts %d (the host's is %d); %d host processes hold no host terminal",
		x.e.name, term, ownDev, hostDev, len(pids))
}

// isPTSMajor says whether a device major number is a Unix98 terminal's
// slave side.
func isPTSMajor(major uint32) bool { return major >= 136 && major <= 143 }

// hostTerminals lists the descriptors of host process pid that are a
// terminal of the host: one on the host's devpts (hostDev), the console,
// or a virtual or serial terminal (major 4).
func hostTerminals(pid int, hostDev uint64) []string {
	dir := fmt.Sprintf("/proc/%d/fd", pid)
	ents, _ := os.ReadDir(dir)
	var out []string
	for _, e := range ents {
		p := filepath.Join(dir, e.Name())
		fi, err := os.Stat(p)
		if err != nil || fi.Mode()&os.ModeCharDevice == 0 {
			continue
		}
		st := fi.Sys().(*syscall.Stat_t)
		major, minor := unix.Major(st.Rdev), unix.Minor(st.Rdev)
		if st.Dev == hostDev || major == 4 || (major == 5 && minor == 1) {
			link, _ := os.Readlink(p)
			out = append(out, fmt.Sprintf("fd %s: %s, device %d:%d", e.Name(), link, major, minor))
		}
	}
	return out
}

// hostPids lists the host processes of the box's sandbox: the jail's
// cgroup, or the container's init, the runtime's processes named after
// the container, and every descendant of those.
func (x *box) hostPids(t *testing.T) []int {
	t.Helper()
	ref := x.ref(t)
	var roots []int
	if x.e.name == local.Name {
		b, err := os.ReadFile(filepath.Join(x.cgroupDir(t, "pids"), "cgroup.procs"))
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range strings.Fields(string(b)) {
			if pid, err := strconv.Atoi(f); err == nil {
				roots = append(roots, pid)
			}
		}
	} else if kb, ok := x.e.be.(*kubernetes.Backend); ok {
		pids, err := kb.Pids(context.Background(), ref)
		if err != nil {
			t.Fatal(err)
		}
		roots = pids
	} else {
		out, err := exec.Command("docker", "inspect", "--format", "{{.State.Pid}}", ref).Output()
		if err != nil {
			t.Fatalf("docker inspect %s: %v", ref, err)
		}
		if pid, err := strconv.Atoi(strings.TrimSpace(string(out))); err == nil && pid > 0 {
			roots = append(roots, pid)
		}
		roots = append(roots, censusPids(ref)...)
	}
	parent := map[int]int{}
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		// The fields after the command name, which may hold anything.
		if i := strings.LastIndexByte(string(b), ')'); i > 0 {
			if f := strings.Fields(string(b[i+1:])); len(f) > 1 {
				parent[pid], _ = strconv.Atoi(f[1])
			}
		}
	}
	in := map[int]bool{}
	for _, r := range roots {
		in[r] = true
	}
	for changed := true; changed; {
		changed = false
		for pid, pp := range parent {
			if in[pp] && !in[pid] {
				in[pid], changed = true, true
			}
		}
	}
	var out []int
	for pid := range in {
		out = append(out, pid)
	}
	return out
}
