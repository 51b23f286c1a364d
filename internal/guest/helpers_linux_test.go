package guest

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/agentbox/agentbox/internal/testutil/syncbuf"
)

// syncBuffer is written by one goroutine while the test reads it.
type syncBuffer = syncbuf.Buffer

// shortDir makes a directory whose socket paths fit the 108-byte limit.
func shortDir(t testing.TB) string {
	t.Helper()
	d, err := os.MkdirTemp("", "abg")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(d) })
	return d
}

// hostGuest is an agentbox-guest running as a plain child of the test.
type hostGuest struct {
	cmd     *exec.Cmd
	ln      *Listener
	conn    *Conn
	sock    string
	token   string
	log     *syncBuffer
	waited  chan struct{}
	waitErr error
}

// startHostGuest starts a guest with args that inherits this process's
// environment (with the canary) and waits for its connection.
func startHostGuest(t *testing.T, args ...string) *hostGuest {
	t.Helper()
	token, err := NewToken()
	if err != nil {
		t.Fatal(err)
	}
	g := startGuestProcess(t, filepath.Join(shortDir(t), "agentbox.sock"), token, token, args...)
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	g.conn, err = g.ln.Accept(ctx)
	if err != nil {
		t.Fatalf("guest did not connect: %v\nguest log:\n%s", err, g.log)
	}
	t.Cleanup(func() { g.conn.Close() })
	return g
}

// startGuestProcess listens on sock for listenToken and starts a guest
// holding guestToken, with args.
func startGuestProcess(t *testing.T, sock, listenToken, guestToken string, args ...string) *hostGuest {
	t.Helper()
	ln, err := Listen(sock, listenToken, ListenOptions{})
	if err != nil {
		t.Fatal(err)
	}
	g := &hostGuest{ln: ln, sock: sock, token: listenToken, log: &syncBuffer{}, waited: make(chan struct{})}
	g.cmd = exec.Command(guestBin, append([]string{"-socket", sock}, args...)...)
	g.cmd.Env = append(os.Environ(), TokenEnv+"="+guestToken)
	g.cmd.Stderr = g.log
	if err := g.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		g.waitErr = g.cmd.Wait()
		close(g.waited)
	}()
	t.Cleanup(func() {
		g.stop(t)
		ln.Close()
		if t.Failed() {
			t.Logf("guest log:\n%s", g.log)
		}
	})
	return g
}

// stop sends SIGTERM and waits for the guest to exit.
func (g *hostGuest) stop(t *testing.T) {
	select {
	case <-g.waited:
		return
	default:
	}
	g.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-g.waited:
	case <-time.After(10 * time.Second):
		t.Errorf("guest did not exit 10s after SIGTERM")
		g.cmd.Process.Kill()
		<-g.waited
	}
}

// run execs req with stdin and returns what it wrote.
func run(t *testing.T, c *Conn, req ExecRequest, stdin string) (ExecResult, string, string, error) {
	t.Helper()
	var out, errb syncBuffer
	var r io.Reader
	if stdin != "" {
		r = strings.NewReader(stdin)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	res, err := c.Exec(ctx, req, r, &out, &errb)
	return res, out.String(), errb.String(), err
}

// hostEnv is a minimal environment for host commands.
var hostEnv = []string{"PATH=/usr/local/bin:/usr/bin:/bin"}

// newMarker returns a unique string to find a test's processes by.
func newMarker() string {
	b := make([]byte, 6)
	rand.Read(b)
	return "abgmark" + hex.EncodeToString(b)
}

// markedSleep makes a symlink to sleep whose path holds marker, so that
// the sleeps of a test show up in its process census too.
func markedSleep(t *testing.T, marker string) string {
	t.Helper()
	sleep, err := exec.LookPath("sleep")
	if err != nil {
		t.Fatal(err)
	}
	dir := shortDir(t)
	os.Chmod(dir, 0o755)
	p := filepath.Join(dir, marker+"-sleep")
	if err := os.Symlink(sleep, p); err != nil {
		t.Fatal(err)
	}
	return p
}

// proc is one process of a census.
type proc struct {
	pid     int
	state   string
	cmdline string
}

// census lists the host's processes whose command line holds marker. It is
// the host's view, not what the sandbox says about itself.
func census(marker string) []proc {
	ents, _ := os.ReadDir("/proc")
	var out []proc
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		cl, err := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		if err != nil || !bytes.Contains(cl, []byte(marker)) {
			continue
		}
		state := "?"
		if st, err := os.ReadFile("/proc/" + e.Name() + "/stat"); err == nil {
			if i := bytes.LastIndexByte(st, ')'); i >= 0 && i+2 < len(st) {
				state = string(st[i+2])
			}
		}
		out = append(out, proc{pid, state, strings.ReplaceAll(string(bytes.TrimRight(cl, "\x00")), "\x00", " ")})
	}
	return out
}

// waitFor polls cond every 10ms until it holds or the deadline passes.
func waitFor(t *testing.T, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", within, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// descendants lists every process below root (zombies included), as
// "pid state cmdline".
func descendants(root int) []proc {
	ents, _ := os.ReadDir("/proc")
	parent := map[int]int{}
	info := map[int]proc{}
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		st, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		i := bytes.LastIndexByte(st, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(string(st[i+1:]))
		if len(f) < 2 {
			continue
		}
		ppid, _ := strconv.Atoi(f[1])
		parent[pid] = ppid
		cl, _ := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		info[pid] = proc{pid, f[0], strings.ReplaceAll(string(bytes.TrimRight(cl, "\x00")), "\x00", " ")}
	}
	var out []proc
	for pid := range parent {
		for p := parent[pid]; p > 1; p = parent[p] {
			if p == root {
				out = append(out, info[pid])
				break
			}
		}
	}
	return out
}

// vmHWM is a process's peak resident memory in KiB.
func vmHWM(t *testing.T, pid int) int {
	t.Helper()
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			n, _ := strconv.Atoi(strings.TrimSuffix(strings.TrimSpace(v), " kB"))
			return n
		}
	}
	t.Fatal("no VmHWM")
	return 0
}
