package guest

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/agentbox/agentbox/internal/testutil/skip"
)

// These tests run the guest for real as the init of a busybox sandbox: a
// Docker container under runc and under runsc (gVisor), and a bubblewrap
// jail, each without network, as uid 1000 without capabilities.

const (
	testImage = "agentbox-test-busybox:guest"
	// testLabel marks every container a test creates; runLabel marks
	// those of one test run, which removes them at the end.
	testLabel = "agentbox.test"
	runLabel  = "agentbox.test.run"
)

// sandbox is a running guest in some isolation.
type sandbox struct {
	name    string
	conn    *Conn
	id      string // container id, for docker
	wantPid int    // the guest's pid inside
	token   string
	// wantLandlock says the guest must enforce Landlock (it was asked to
	// and nothing in the sandbox stands in the way).
	wantLandlock bool
}

func TestSandboxes(t *testing.T) {
	rootfs := buildRootfs(t)
	// Whatever a failed run leaves behind goes when all subtests are done.
	t.Cleanup(func() { removeTestContainers(t) })
	// Every guest runs its commands under Landlock where it can (best
	// effort), as the backends ask it to; where it cannot, a guest that
	// requires it must refuse commands.
	t.Run("runc", func(t *testing.T) {
		t.Parallel()
		requireDocker(t)
		ensureImage(t, rootfs)
		sb := startContainer(t, "runc", "--landlock")
		exerciseSandbox(t, sb)
		checkLandlockRequired(t, sb, func(args ...string) *sandbox { return startContainer(t, "runc", args...) })
	})
	t.Run("runsc", func(t *testing.T) {
		t.Parallel()
		requireDocker(t)
		requireRuntime(t, "runsc")
		ensureImage(t, rootfs)
		sb := startContainer(t, "runsc", "--landlock")
		exerciseSandbox(t, sb)
		checkLandlockRequired(t, sb, func(args ...string) *sandbox { return startContainer(t, "runsc", args...) })
	})
	t.Run("bwrap", func(t *testing.T) {
		t.Parallel()
		sb := startBwrap(t, rootfs, false, "--landlock")
		sb.wantLandlock = hostLandlockABI() > 0 // nothing in the jail refuses it
		exerciseSandbox(t, sb)
	})
	t.Run("bwrap-as-pid-1", func(t *testing.T) {
		t.Parallel()
		sb := startBwrap(t, rootfs, true, "--landlock=required")
		sb.wantLandlock = hostLandlockABI() > 0
		exerciseSandbox(t, sb)
	})
}

// checkLandlockRequired starts, next to sb, a sandbox of the same kind
// whose guest requires Landlock: where sb's guest could not enforce it,
// that guest must still connect, say so, and refuse every command.
func checkLandlockRequired(t *testing.T, sb *sandbox, start func(args ...string) *sandbox) {
	if sb.conn.Info().Landlock.Enforced {
		return // TestLandlock and bwrap-as-pid-1 cover required mode with Landlock
	}
	t.Run("landlock required", func(t *testing.T) {
		req := start("--landlock=required")
		st := req.conn.Info().Landlock
		if st.Mode != LandlockRequired || st.Enforced || st.Detail == "" {
			t.Errorf("landlock status %+v, want required, not enforced, with the reason", st)
		}
		res, out, _, err := run(t, req.conn, ExecRequest{Argv: []string{"echo", "ran"}, Env: []string{"PATH=/bin"}}, "")
		var se *StartError
		if !errors.As(err, &se) || !strings.Contains(se.Reason, "landlock is required") || out != "" || res.ExitCode != 126 {
			t.Errorf("got %v %+v %q; want the command refused because Landlock is missing", err, res, out)
		}
	})
}

// exerciseSandbox runs the guest's checks that make sense in any sandbox.
func exerciseSandbox(t *testing.T, sb *sandbox) {
	c := sb.conn
	env := []string{"PATH=/bin", "HOME=/home/agent"}
	must := func(t *testing.T, req ExecRequest, stdin string) (ExecResult, string, string) {
		t.Helper()
		if req.Env == nil {
			req.Env = env
		}
		res, out, errOut, err := run(t, c, req, stdin)
		if err != nil {
			t.Fatalf("%v: %v", req.Argv, err)
		}
		return res, out, errOut
	}

	if got := c.Info().Pid; got != sb.wantPid {
		t.Errorf("guest pid %d inside the sandbox, want %d", got, sb.wantPid)
	}
	t.Run("identity", func(t *testing.T) {
		_, out, _ := must(t, ExecRequest{Argv: []string{"id"}}, "")
		if !strings.HasPrefix(out, "uid=1000") || !strings.Contains(out, "gid=1000") {
			t.Errorf("id: %q", out)
		}
		_, out, _ = must(t, ExecRequest{Argv: []string{"grep", "-E", "^(CapEff|NoNewPrivs)", "/proc/self/status"}}, "")
		// gVisor 20221219 has no NoNewPrivs line in /proc/PID/status.
		if !strings.Contains(out, "CapEff:\t0000000000000000") || (strings.Contains(out, "NoNewPrivs") && !strings.Contains(out, "NoNewPrivs:\t1")) {
			t.Errorf("capabilities and no_new_privs: %q", out)
		}
	})
	t.Run("exec", func(t *testing.T) {
		res, out, errOut := must(t, ExecRequest{Argv: []string{"sh", "-c", "echo out; echo err >&2; exit 5"}}, "")
		if out != "out\n" || errOut != "err\n" || res.ExitCode != 5 {
			t.Errorf("got %q %q %+v", out, errOut, res)
		}
		_, out, _ = must(t, ExecRequest{Argv: []string{"cat"}}, "piped\n")
		if out != "piped\n" {
			t.Errorf("stdin: %q", out)
		}
		_, out, _ = must(t, ExecRequest{Argv: []string{"/bin/env"}, Env: []string{"ONLY=this"}}, "")
		if out != "ONLY=this\n" {
			t.Errorf("environment: %q", out)
		}
		_, out, _ = must(t, ExecRequest{Argv: []string{"pwd"}}, "")
		if out != DefaultWorkdir+"\n" {
			t.Errorf("default working directory: %q", out)
		}
	})
	t.Run("token not readable", func(t *testing.T) {
		// Linux hides a non-dumpable process's environment; gVisor shows
		// it, so the guest re-executes itself without the token.
		res, out, errOut := must(t, ExecRequest{Argv: []string{"sh", "-c", fmt.Sprintf("cat /proc/%d/environ /proc/%d/cmdline", sb.wantPid, sb.wantPid)}}, "")
		if strings.Contains(out, sb.token) || strings.Contains(out, TokenEnv+"=") {
			t.Errorf("a command can read the guest's token: exit %d, %q %q", res.ExitCode, out, errOut)
		}
	})
	t.Run("timeout kills the tree", func(t *testing.T) {
		marker := newMarker()
		res, out, _ := must(t, ExecRequest{
			Argv:    []string{"sh", "-c", busyboxHostileScript, marker},
			Timeout: 2 * time.Second,
		}, "")
		if !res.TimedOut || res.Signal != int(syscall.SIGKILL) || out != "ready\n" {
			t.Errorf("got %+v %q", res, out)
		}
		// Ask the sandbox for its process list: only the guest, its idle
		// reaper, and this ps with its reaper may be left.
		_, ps, _ := must(t, ExecRequest{Argv: []string{"ps", "-o", "pid,stat,args"}}, "")
		for _, line := range strings.Split(strings.TrimSpace(ps), "\n")[1:] {
			if !strings.Contains(line, "agentbox-guest") && !strings.HasSuffix(line, "ps -o pid,stat,args") {
				t.Errorf("left after the timeout: %q", line)
			}
		}
		if sb.name != "runsc" {
			// And the host's view, where the sandbox's processes are the
			// host's (gVisor's are not).
			if left := census(marker); len(left) != 0 {
				t.Errorf("host sees processes left: %+v", left)
			}
		}
	})
	t.Run("what a command leaves dies with it", func(t *testing.T) {
		// Background children, a double fork and a new session: orphans,
		// which the reaper (or, where reapers cannot keep them, the guest)
		// kills before the result goes out.
		marker := newMarker()
		// Each orphan is a shell whose command line holds the marker,
		// with a sleep below it.
		res, out, _ := must(t, ExecRequest{Argv: []string{"sh", "-c",
			`sh -c "sleep 1000; :" "$1" & (sh -c "sleep 1001; :" "$1" &) ; setsid sh -c "sleep 1002; :" "$1" & echo started`, "sh", marker}}, "")
		if res.ExitCode != 0 || out != "started\n" {
			t.Fatalf("got %+v %q", res, out)
		}
		_, ps, _ := must(t, ExecRequest{Argv: []string{"ps", "-o", "pid,stat,args"}}, "")
		for _, line := range strings.Split(strings.TrimSpace(ps), "\n")[1:] {
			if strings.Contains(line, marker) || strings.Contains(line, "sleep 100") {
				t.Errorf("left after the command ended: %q", line)
			}
		}
		if sb.name != "runsc" {
			if left := census(marker); len(left) != 0 {
				t.Errorf("host sees processes left: %+v", left)
			}
		}
	})
	t.Run("guest survives signals from commands", func(t *testing.T) {
		// Linux protects a namespace's PID 1 from SIGKILL and SIGSTOP sent
		// from inside; gVisor 20221219 does not, and under bubblewrap
		// without --as-pid-1 the guest is not PID 1: the reapers' seccomp
		// filter covers both.
		script := fmt.Sprintf("for s in KILL STOP INT HUP QUIT USR1 USR2 PIPE TSTP TERM; do kill -$s 1 %d; done; echo sent", sb.wantPid)
		if res, out, errOut := must(t, ExecRequest{Argv: []string{"sh", "-c", script}}, ""); out != "sent\n" {
			t.Fatalf("got %+v %q %q", res, out, errOut)
		}
		if _, err := c.Ping(t.Context()); err != nil {
			t.Fatalf("the guest is gone: %v", err)
		}
		if _, out, _ := must(t, ExecRequest{Argv: []string{"echo", "alive"}}, ""); out != "alive\n" {
			t.Fatalf("after the signals: %q", out)
		}
	})
	t.Run("concurrent", func(t *testing.T) {
		var wg sync.WaitGroup
		for i := range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				res, out, _, err := run(t, c, ExecRequest{Argv: []string{"sh", "-c", "echo $0; exit $0", fmt.Sprint(i)}, Env: env}, "")
				if err != nil || res.ExitCode != i || out != fmt.Sprintf("%d\n", i) {
					t.Errorf("job %d: %v %+v %q", i, err, res, out)
				}
			}()
		}
		wg.Wait()
	})
	t.Run("pty", func(t *testing.T) {
		res, out, _ := must(t, ExecRequest{Argv: []string{"stty", "size"}, TTY: true, Rows: 33, Cols: 99}, "")
		if strings.TrimSpace(out) != "33 99" || res.ExitCode != 0 {
			t.Errorf("stty size: %q %+v", out, res)
		}
		s, err := c.PTY(t.Context(), ExecRequest{Argv: []string{"sh"}, Env: env, Rows: 20, Cols: 60})
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		term := &termReader{r: s}
		go term.pump()
		s.Resize(44, 144)
		s.Write([]byte("stty size; exit 4\n"))
		term.waitFor(t, "44 144")
		if res, err := s.Wait(t.Context()); err != nil || res.ExitCode != 4 {
			t.Errorf("shell: %v %+v", err, res)
		}
	})
	t.Run("landlock", func(t *testing.T) {
		st := c.Info().Landlock
		if st.Mode == LandlockOff {
			t.Fatalf("landlock status %+v: the guest was asked for Landlock", st)
		}
		if sb.wantLandlock && !st.Enforced {
			t.Fatalf("landlock status %+v, want enforced", st)
		}
		t.Logf("%s: landlock %s", sb.name, st)
		// /tmp stays writable either way. Landlock keeps a process from
		// writing its own name to /proc/self/comm, which Linux allows it
		// otherwise (TestLandlock's control shows it on this kernel;
		// gVisor refuses it anyway).
		res, out, errOut := must(t, ExecRequest{Argv: []string{"sh", "-c", "echo x > /tmp/landlock-probe && echo tmp; echo probe 2>/dev/null > /proc/self/comm && echo proc"}}, "")
		if !strings.HasPrefix(out, "tmp\n") || (st.Enforced && out != "tmp\n") {
			t.Errorf("probe with landlock %s: %+v %q %q", st, res, out, errOut)
		}
		if !st.Enforced && st.Detail == "" {
			t.Errorf("landlock status %+v: no reason why it is not enforced", st)
		}
	})
	t.Run("output cap", func(t *testing.T) {
		res, out, _ := must(t, ExecRequest{Argv: []string{"head", "-c", "5000000", "/dev/zero"}, MaxOutputBytes: 1000}, "")
		if !res.StdoutTruncated || res.StdoutBytes != 5000000 || out != string(make([]byte, 1000))+TruncationMarker(1000) {
			t.Errorf("got %+v and %d bytes", res, len(out))
		}
	})
}

// TestExecLatency measures the exec round trip of a trivial command
// through the guest in each kind of sandbox, next to docker exec on the
// same container and a bare fork+exec on the host. It runs alone (not in
// parallel), one sandbox at a time, and prints medians with -v; it asserts
// nothing about speed.
func TestExecLatency(t *testing.T) {
	rootfs := buildRootfs(t)
	t.Cleanup(func() { removeTestContainers(t) })
	const n, m = 200, 20
	// busybox is the same static binary on the host and in the sandboxes.
	trueArgv := []string{"/bin/busybox", "true"}
	timeIt := func(t *testing.T, count int, f func() error) time.Duration {
		times := make([]time.Duration, count)
		for i := range count {
			start := time.Now()
			if err := f(); err != nil {
				t.Fatal(err)
			}
			times[i] = time.Since(start)
		}
		return median(times)
	}
	var report []string
	measure := func(t *testing.T, sb *sandbox) {
		d := timeIt(t, n, func() error {
			res, err := sb.conn.Exec(t.Context(), ExecRequest{Argv: trueArgv, Dir: "/"}, nil, nil, nil)
			if err == nil && res.ExitCode != 0 {
				err = fmt.Errorf("true: %+v", res)
			}
			return err
		})
		line := fmt.Sprintf("%-15s guest exec %8s", sb.name, d.Round(time.Microsecond))
		if sb.id != "" {
			de := timeIt(t, m, func() error {
				out, err := exec.Command("docker", append([]string{"exec", sb.id}, trueArgv...)...).CombinedOutput()
				if err != nil {
					return fmt.Errorf("docker exec: %v %s", err, out)
				}
				return nil
			})
			line += fmt.Sprintf("   docker exec %8s   ratio %3.0fx", de.Round(time.Microsecond), float64(de)/float64(d))
		}
		report = append(report, line)
	}
	t.Run("fork", func(t *testing.T) {
		d := timeIt(t, n, func() error { return exec.Command(trueArgv[0], trueArgv[1:]...).Run() })
		report = append(report, fmt.Sprintf("%-15s fork+exec  %8s", "host (no guest)", d.Round(time.Microsecond)))
	})
	t.Run("host", func(t *testing.T) {
		g := startHostGuest(t)
		measure(t, &sandbox{name: "host", conn: g.conn})
	})
	for _, rt := range []string{"runc", "runsc"} {
		t.Run(rt, func(t *testing.T) {
			requireDocker(t)
			requireRuntime(t, rt)
			ensureImage(t, rootfs)
			measure(t, startContainer(t, rt))
		})
	}
	t.Run("bwrap", func(t *testing.T) { measure(t, startBwrap(t, rootfs, false)) })
	t.Run("bwrap-as-pid-1", func(t *testing.T) { measure(t, startBwrap(t, rootfs, true)) })
	t.Logf("exec round trip of %q, medians (guest n=%d, docker exec n=%d):\n%s", strings.Join(trueArgv, " "), n, m, strings.Join(report, "\n"))
}

// busyboxHostileScript is hostileScript for busybox, without the marked
// sleeps: inside a sandbox the sandbox's own process list is the census.
const busyboxHostileScript = `
trap '' TERM INT HUP
setsid sh -c 'trap "" TERM; sleep 1000' "$0-setsid" &
sh -c 'sh -c "trap \"\" TERM; sleep 1000" "$0-double" & exit 0' "$0" &
sh -c 'kill -STOP $$; sleep 1000' "$0-stopped" &
nohup sh -c 'sleep 1000' "$0-nohup" >/dev/null 2>&1 &
echo ready
while :; do sleep 1000; done
`

func median(d []time.Duration) time.Duration {
	s := slices.Clone(d)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return s[len(s)/2]
}

// buildRootfs makes a busybox root file system: busybox-static with a
// symlink per applet, a user 1000, and the mount points the sandboxes use.
func buildRootfs(t testing.TB) string {
	t.Helper()
	busybox, err := exec.LookPath("busybox")
	if err != nil {
		skip.OrFail(t, "busybox is not installed (Debian package busybox-static)")
	}
	if out, err := exec.Command("file", "-L", busybox).Output(); err == nil && !bytes.Contains(out, []byte("statically linked")) {
		skip.OrFail(t, busybox+" is not static: install busybox-static")
	}
	list, err := exec.Command(busybox, "--list").Output()
	if err != nil {
		t.Fatalf("busybox --list: %v", err)
	}
	root := filepath.Join(t.TempDir(), "rootfs")
	for _, d := range []string{"bin", "etc", "tmp", "proc", "dev", "sys", "run/agentbox", "workspace", "home/agent"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	os.Chmod(filepath.Join(root, "tmp"), 0o1777)
	data, err := os.ReadFile(busybox)
	if err != nil {
		t.Fatal(err)
	}
	files := map[string]string{
		"bin/busybox":    string(data),
		"etc/passwd":     "root:x:0:0:root:/root:/bin/sh\nagent:x:1000:1000:agent:/home/agent:/bin/sh\n",
		"etc/group":      "root:x:0:\nagent:x:1000:\n",
		"agentbox-guest": "", // mount point for the guest binary
	}
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(root, name), []byte(content), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, applet := range strings.Fields(string(list)) {
		if applet != "busybox" {
			os.Symlink("busybox", filepath.Join(root, "bin", applet))
		}
	}
	return root
}

func requireDocker(t testing.TB) {
	t.Helper()
	if _, err := exec.LookPath("docker"); err != nil {
		skip.OrFail(t, "the docker CLI is not installed")
	}
	if out, err := exec.Command("docker", "version", "--format", "{{.Server.Version}}").CombinedOutput(); err != nil {
		skip.OrFail(t, fmt.Sprintf("no Docker engine: %v %s", err, out))
	}
}

func requireRuntime(t testing.TB, name string) {
	t.Helper()
	out, err := exec.Command("docker", "info", "--format", "{{json .Runtimes}}").Output()
	if err != nil || !bytes.Contains(out, []byte(`"`+name+`"`)) {
		skip.OrFail(t, "the Docker engine has no "+name+" runtime")
	}
}

var imageOnce sync.Mutex

// ensureImage imports the busybox root file system as testImage unless
// the engine has it. Nothing is ever pulled.
func ensureImage(t testing.TB, rootfs string) {
	t.Helper()
	imageOnce.Lock()
	defer imageOnce.Unlock()
	if exec.Command("docker", "image", "inspect", testImage).Run() == nil {
		return
	}
	var buf bytes.Buffer
	if err := tarDir(&buf, rootfs); err != nil {
		t.Fatal(err)
	}
	imp := exec.Command("docker", "import", "-", testImage)
	imp.Stdin = &buf
	if out, err := imp.CombinedOutput(); err != nil {
		t.Fatalf("docker import: %v %s", err, out)
	}
}

// tarDir writes dir as a tar owned by root.
func tarDir(w io.Writer, dir string) error {
	tw := tar.NewWriter(w)
	err := filepath.Walk(dir, func(p string, fi os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		if rel == "." {
			return nil
		}
		link := ""
		if fi.Mode()&os.ModeSymlink != 0 {
			link, _ = os.Readlink(p)
		}
		h, err := tar.FileInfoHeader(fi, link)
		if err != nil {
			return err
		}
		h.Name, h.Uid, h.Gid, h.Uname, h.Gname = rel, 0, 0, "root", "root"
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		if fi.Mode().IsRegular() {
			f, err := os.Open(p)
			if err != nil {
				return err
			}
			defer f.Close()
			_, err = io.Copy(tw, f)
			return err
		}
		return nil
	})
	if err != nil {
		return err
	}
	return tw.Close()
}

// sandboxSocket makes the per-sandbox socket directory, reachable by the
// sandbox's user, and listens in it.
func sandboxSocket(t testing.TB) (dir, token string, ln *Listener) {
	t.Helper()
	dir = shortDir(t)
	os.Chmod(dir, 0o755)
	token, err := NewToken()
	if err != nil {
		t.Fatal(err)
	}
	var log syncBuffer
	ln, err = Listen(filepath.Join(dir, "agentbox.sock"), token, ListenOptions{Logger: slog.New(slog.NewTextHandler(&log, nil))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ln.Close()
		if t.Failed() {
			t.Logf("daemon-side log:\n%s", log.String())
		}
	})
	return dir, token, ln
}

func accept(t testing.TB, ln *Listener, logs func() string) *Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	c, err := ln.Accept(ctx)
	if err != nil {
		t.Fatalf("the guest did not connect: %v\nlogs:\n%s", err, logs())
	}
	t.Cleanup(func() { c.Close() })
	return c
}

var runID = newMarker()

// dockerRunArgs is the docker run command line of a test sandbox whose
// guest dials a socket in dir with token.
func dockerRunArgs(runtime, dir, token string, guestArgs ...string) []string {
	args := []string{"run", "-d",
		"--label", testLabel + "=1", "--label", runLabel + "=" + runID,
		"--runtime", runtime,
		"--network", "none",
		"--user", "1000:1000",
		"--cap-drop", "ALL",
		"--security-opt", "no-new-privileges",
		"--read-only", "--tmpfs", "/tmp",
		"--mount", "type=bind,src=" + guestBin + ",dst=/agentbox-guest,readonly",
		"--mount", "type=bind,src=" + dir + ",dst=/run/agentbox",
		"-e", TokenEnv + "=" + token,
		"--entrypoint", "/agentbox-guest",
		testImage,
	}
	return append(args, guestArgs...)
}

func startContainer(t *testing.T, runtime string, guestArgs ...string) *sandbox {
	t.Helper()
	dir, token, ln := sandboxSocket(t)
	out, err := exec.Command("docker", dockerRunArgs(runtime, dir, token, guestArgs...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("docker run: %v %s", err, out)
	}
	id := strings.TrimSpace(string(out))
	t.Cleanup(func() {
		if out, err := exec.Command("docker", "rm", "-f", id).CombinedOutput(); err != nil {
			t.Errorf("removing container %s: %v %s", id, err, out)
		}
	})
	logs := func() string {
		out, _ := exec.Command("docker", "logs", id).CombinedOutput()
		return string(out)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("container logs:\n%s", logs())
		}
	})
	c := accept(t, ln, logs)
	t.Cleanup(func() {
		// SIGTERM reaches the guest as PID 1: it kills everything and
		// exits, so the container stops at once, not after docker's 10s.
		start := time.Now()
		out, err := exec.Command("docker", "stop", "-t", "10", id).CombinedOutput()
		if err != nil {
			t.Errorf("docker stop: %v %s", err, out)
		} else if d := time.Since(start); d > 5*time.Second {
			t.Errorf("docker stop took %s: the guest ignored SIGTERM", d)
		}
	})
	return &sandbox{name: runtime, conn: c, id: id, wantPid: 1, token: token}
}

// removeTestContainers removes the containers of this test run.
func removeTestContainers(t testing.TB) {
	out, err := exec.Command("docker", "ps", "-aq", "--filter", "label="+runLabel+"="+runID).Output()
	if err != nil {
		t.Errorf("listing test containers: %v", err)
		return
	}
	if ids := strings.Fields(string(out)); len(ids) > 0 {
		if out, err := exec.Command("docker", append([]string{"rm", "-f"}, ids...)...).CombinedOutput(); err != nil {
			t.Errorf("removing test containers: %v %s", err, out)
		}
	}
}

// bwrapCommand is a bubblewrap jail over rootfs whose guest dials a
// socket in dir with token.
func bwrapCommand(t testing.TB, rootfs, dir, token string, asPid1 bool, guestArgs ...string) *exec.Cmd {
	t.Helper()
	bwrap, err := exec.LookPath("bwrap")
	if err != nil {
		skip.OrFail(t, "bubblewrap is not installed")
	}
	args := []string{"--unshare-all", "--die-with-parent",
		"--ro-bind", rootfs, "/",
		"--ro-bind", guestBin, "/agentbox-guest",
		"--bind", dir, "/run/agentbox",
		"--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp",
		"--uid", "1000", "--gid", "1000",
	}
	if asPid1 {
		args = append(args, "--as-pid-1")
	}
	args = append(args, "/agentbox-guest")
	cmd := exec.Command(bwrap, append(args, guestArgs...)...)
	cmd.Env = []string{TokenEnv + "=" + token}
	return cmd
}

func startBwrap(t *testing.T, rootfs string, asPid1 bool, guestArgs ...string) *sandbox {
	t.Helper()
	dir, token, ln := sandboxSocket(t)
	cmd := bwrapCommand(t, rootfs, dir, token, asPid1, guestArgs...)
	wantPid := 2 // bubblewrap keeps PID 1 for its own init
	name := "bwrap"
	if asPid1 {
		wantPid = 1
		name = "bwrap-as-pid-1"
	}
	var log syncBuffer
	cmd.Stdout, cmd.Stderr = &log, &log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Errorf("bwrap did not exit after SIGTERM")
			cmd.Process.Kill()
			<-done
		}
		if t.Failed() {
			t.Logf("bwrap output:\n%s", log.String())
		}
	})
	c := accept(t, ln, log.String)
	return &sandbox{name: name, conn: c, wantPid: wantPid, token: token}
}
