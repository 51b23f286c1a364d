package backendtest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/agentbox/agentbox/internal/errdefs"
	"github.com/agentbox/agentbox/internal/guest"
	"github.com/agentbox/agentbox/internal/mountinfo"
	"github.com/agentbox/agentbox/internal/sandbox"
)

// testLifecycle: create -> the guest connects -> exec; inspect, list,
// pause, stop (the guest's connection ends), remove (idempotent), and
// nothing left: no container, no process, no mount; the run directory can
// be deleted.
func testLifecycle(t *testing.T, s *suite) {
	ctx := t.Context()
	b := s.b
	x := s.create(t, boxOpts{})
	t.Logf("%s: Create took %s, the guest connected %s after Create began", b.Name(), x.created.Round(time.Millisecond), x.connect.Round(time.Millisecond))

	if out := x.mustSh(t, "id -u; id -g"); out != fmt.Sprintf("%d\n%d\n", s.h.UID, s.h.GID) {
		t.Errorf("id -u; id -g: %q, want %d and %d", out, s.h.UID, s.h.GID)
	}
	if res, _, _, err := x.exec(t, guest.ExecRequest{Argv: []string{"true"}}, ""); err != nil || res.ExitCode != 0 {
		t.Errorf("true: %v %+v", err, res)
	}

	wantLabels := map[string]string{
		sandbox.LabelManaged:   "1",
		sandbox.LabelSandbox:   x.req.ID,
		sandbox.LabelWorkspace: x.req.WorkspaceID,
	}
	checkInfo := func(what string, info sandbox.Info, state sandbox.State) {
		t.Helper()
		if info.ID != x.req.ID || info.Backend != b.Name() || info.Ref != x.info.Ref || info.State != state {
			t.Errorf("%s: %+v, want id %s, backend %s, ref %s, state %s", what, info, x.req.ID, b.Name(), x.info.Ref, state)
		}
		for k, v := range wantLabels {
			if info.Labels[k] != v {
				t.Errorf("%s: label %s=%q, want %q", what, k, info.Labels[k], v)
			}
		}
	}
	if x.info.Ref == "" {
		t.Fatalf("Create returned no ref: %+v", x.info)
	}
	checkInfo("Create", x.info, sandbox.StateRunning)
	info, err := b.Inspect(ctx, x.info.Ref)
	if err != nil {
		t.Fatalf("Inspect: %v", err)
	}
	checkInfo("Inspect", info, sandbox.StateRunning)

	list := func(labels map[string]string) []sandbox.Info {
		t.Helper()
		l, err := b.List(ctx, labels)
		if err != nil {
			t.Fatalf("List %v: %v", labels, err)
		}
		return l
	}
	for _, labels := range []map[string]string{
		{sandbox.LabelSandbox: x.req.ID},
		{sandbox.LabelWorkspace: x.req.WorkspaceID},
		{sandbox.LabelManaged: "1", sandbox.LabelSandbox: x.req.ID, sandbox.LabelWorkspace: x.req.WorkspaceID},
	} {
		got := list(labels)
		if len(got) != 1 {
			t.Errorf("List %v: %d sandboxes %+v, want exactly %s", labels, len(got), got, x.req.ID)
			continue
		}
		checkInfo(fmt.Sprintf("List %v", labels), got[0], sandbox.StateRunning)
	}
	if got := list(map[string]string{sandbox.LabelSandbox: "sb_none" + randHex(4)}); len(got) != 0 {
		t.Errorf("List of a sandbox id nobody has: %+v", got)
	}
	if got := list(map[string]string{sandbox.LabelSandbox: x.req.ID, sandbox.LabelWorkspace: "ws_other"}); len(got) != 0 {
		t.Errorf("List with one label that does not match: %+v", got)
	}
	if got := list(nil); !slices.ContainsFunc(got, func(i sandbox.Info) bool { return i.Ref == x.info.Ref }) {
		t.Errorf("List of everything lacks %s", x.req.ID)
	}

	// The census must see a running sandbox, or its "nothing left" below
	// would prove nothing.
	markers := x.markers()
	if procs := census(markers); len(procs) == 0 {
		t.Errorf("the host census finds no process of running sandbox %s (markers %q): the probe cannot work", x.req.ID, markers)
	}

	if p, ok := b.(sandbox.Pauser); ok {
		if err := p.Pause(ctx, x.info.Ref); err != nil {
			t.Fatalf("Pause: %v", err)
		}
		pctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
		_, err := x.conn.Ping(pctx)
		cancel()
		if err == nil {
			t.Errorf("a paused sandbox's guest answered a ping")
		}
		if err := p.Resume(ctx, x.info.Ref); err != nil {
			t.Fatalf("Resume: %v", err)
		}
		pctx, cancel = context.WithTimeout(ctx, promptly)
		_, err = x.conn.Ping(pctx)
		cancel()
		if err != nil {
			t.Errorf("the guest does not answer after Resume: %v", err)
		}
		if out := x.mustSh(t, "echo resumed"); out != "resumed\n" {
			t.Errorf("after Resume: %q", out)
		}
	}

	start := time.Now()
	if err := b.Stop(ctx, x.info.Ref); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	stopped := time.Since(start)
	select {
	case <-x.conn.Done():
		t.Logf("%s: Stop took %s; the guest's connection ended %s after Stop began", b.Name(), stopped.Round(time.Millisecond), time.Since(start).Round(time.Millisecond))
	case <-time.After(promptly):
		t.Fatalf("the guest's connection is still up %s after Stop", promptly)
	}
	if res, _, _, err := x.exec(t, guest.ExecRequest{Argv: []string{"true"}}, ""); err == nil && !res.Lost {
		t.Errorf("exec after Stop: %+v, want an error", res)
	}
	if info, err := b.Inspect(ctx, x.info.Ref); err != nil {
		t.Errorf("Inspect after Stop: %v", err)
	} else {
		checkInfo("Inspect after Stop", info, sandbox.StateStopped)
	}
	if err := b.Stop(ctx, x.info.Ref); err != nil {
		t.Errorf("Stop of a stopped sandbox: %v", err)
	}

	if err := b.Remove(ctx, x.info.Ref); err != nil {
		t.Fatalf("Remove: %v", err)
	}
	if _, err := b.Inspect(ctx, x.info.Ref); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("Inspect after Remove: %v, want ErrNotFound", err)
	}
	if err := b.Remove(ctx, x.info.Ref); err != nil {
		t.Errorf("Remove again: %v, want nil", err)
	}
	if got := list(map[string]string{sandbox.LabelSandbox: x.req.ID}); len(got) != 0 {
		t.Errorf("List after Remove: %+v", got)
	}
	checkGone(t, s, x)
	// The run directory and the workspace are the daemon's to delete now.
	for _, dir := range []string{x.req.RunDir, x.req.Files} {
		if left, err := mountinfo.Under(dir); err != nil || len(left) != 0 {
			t.Errorf("mounts left under %s: %v %v", dir, left, err)
		}
	}
	if err := os.RemoveAll(x.req.RunDir); err != nil {
		t.Errorf("deleting the run directory: %v", err)
	}
}

// checkGone asserts that nothing of a removed sandbox is left on the host.
func checkGone(t *testing.T, s *suite, x *box) {
	t.Helper()
	if left := s.leftovers(t, x.req.ID); len(left) != 0 {
		t.Errorf("the engine still holds %v for removed sandbox %s", left, x.req.ID)
	}
	var procs []string
	start := time.Now()
	if !eventually(promptly, func() bool { procs = census(x.markers()); return len(procs) == 0 }) {
		t.Errorf("processes of removed sandbox %s still run %s later: %q", x.req.ID, promptly, procs)
	} else if d := time.Since(start); d > time.Second {
		t.Logf("the last process of removed sandbox %s ended %s after Remove returned", x.req.ID, d.Round(time.Millisecond))
	}
}

// testSandbox checks what one sandbox looks like from inside: identity,
// exec semantics, environment, workspace, root, /tmp and network.
func testSandbox(t *testing.T, s *suite) {
	x := s.create(t, boxOpts{})

	t.Run("identity", func(t *testing.T) {
		if out := x.mustSh(t, "id -u; id -g"); out != fmt.Sprintf("%d\n%d\n", s.h.UID, s.h.GID) {
			t.Errorf("id: %q", out)
		}
		status := x.mustSh(t, "cat /proc/self/status")
		want := []string{"CapEff:\t0000000000000000", "CapPrm:\t0000000000000000", "CapBnd:\t0000000000000000", "CapAmb:\t0000000000000000"}
		if s.h.Quirks.NoNewPrivsHidden {
			if strings.Contains(status, "NoNewPrivs:") {
				t.Errorf("NoNewPrivs shows after all; drop the quirk")
			}
		} else {
			want = append(want, "NoNewPrivs:\t1")
		}
		if s.h.Quirks.NoSeccompFilter {
			t.Logf("%s: no seccomp filter inside (documented quirk): %q", s.b.Name(), grepLine(status, "Seccomp:"))
		} else {
			want = append(want, "Seccomp:\t2")
		}
		for _, w := range want {
			if !strings.Contains(status, w+"\n") && !(strings.HasPrefix(w, "CapAmb") && !strings.Contains(status, "CapAmb:")) {
				t.Errorf("/proc/self/status lacks %q", w)
			}
		}
		// A guest with a user of its own runs as that user: the backend
		// started it so, and not as the commands' user.
		if s.h.GuestUID != 0 {
			pid := strconv.Itoa(x.conn.Info().Pid)
			want := fmt.Sprintf("Uid:\t%d\t%d\t%d\t%d\n", s.h.GuestUID, s.h.GuestUID, s.h.GuestUID, s.h.GuestUID)
			if st := x.mustSh(t, "cat /proc/"+pid+"/status"); !strings.Contains(st, want) || !strings.Contains(st, "CapBnd:\t0000000000000000\n") {
				t.Errorf("the guest (pid %s) does not run as its own user %d with an empty bounding set: %q", pid, s.h.GuestUID, st)
			}
		}
	})

	t.Run("exit status", func(t *testing.T) {
		for _, tc := range []struct {
			script       string
			code, signal int
		}{
			{"exit 0", 0, 0},
			{"exit 7", 7, 0},
			{"false", 1, 0},
			{"kill -TERM $$", 128 + int(syscall.SIGTERM), int(syscall.SIGTERM)},
			{"kill -KILL $$", 128 + int(syscall.SIGKILL), int(syscall.SIGKILL)},
		} {
			res, _, _ := x.sh(t, tc.script)
			if res.ExitCode != tc.code || res.Signal != tc.signal || res.Lost || res.TimedOut {
				t.Errorf("%s: %+v, want exit %d signal %d", tc.script, res, tc.code, tc.signal)
			}
		}
		res, _, _, err := x.exec(t, guest.ExecRequest{Argv: []string{"no-such-command-" + randHex(3)}}, "")
		var se *guest.StartError
		if !errors.As(err, &se) || res.ExitCode != 127 {
			t.Errorf("a missing command: %v %+v, want a StartError and 127", err, res)
		}
	})

	// Job control as on Linux: a stopped member of the command's process
	// group stays stopped until it is continued, or until the command's
	// tree ends with the command. Neither the reap of another member nor
	// the command's own exit sends it SIGHUP and SIGCONT, and the result
	// is the command's own. (gVisor sends them whenever a member of a
	// group it counts as orphaned is reaped, and counts wrong once a
	// member's parent dies: see the reaper in package initd.)
	t.Run("job control", func(t *testing.T) {
		// Each script starts a child that stops itself and waits until it
		// has, so that what follows happens while it is stopped.
		const stopped = `sh -c 'trap "" HUP; kill -STOP $$; echo resumed' &
until [ "$(cut -d' ' -f3 /proc/$!/stat)" = T ]; do sleep 0.01; done
`
		// A double fork leaves a child whose parent dies; it is reaped
		// while its sibling is stopped.
		res, out, errOut := x.sh(t, stopped+`(sleep 0.1 &)
sleep 0.3
echo "state $(cut -d' ' -f3 /proc/$!/stat)"
kill -CONT $!
wait $!
echo "child $?"`)
		if want := "state T\nresumed\nchild 0\n"; res.ExitCode != 0 || res.Signal != 0 || out != want {
			t.Errorf("a stopped child continued later: %+v stdout %q stderr %q, want exit 0 and %q", res, out, errOut, want)
		}

		// On a terminal, where the command's group is the foreground one,
		// other members are reaped while the child is stopped.
		res, out, _, err := x.exec(t, guest.ExecRequest{TTY: true, Argv: []string{"sh", "-c",
			stopped + `sleep 0.1; kill -CONT $!; wait $!; echo "child $?"`}}, "")
		if err != nil || res.ExitCode != 0 || res.Signal != 0 || !strings.Contains(out, "resumed\r\nchild 0\r\n") {
			t.Errorf("a stopped child on a terminal: %v %+v output %q, want exit 0 and resumed, child 0", err, res, out)
		}

		// Nobody continues it: it stays stopped, and the command waits for
		// it until the timeout kills the tree.
		res, out, errOut, err = x.exec(t, guest.ExecRequest{Timeout: time.Second, Argv: []string{"sh", "-c",
			stopped + `(sleep 0.1 &); wait $!; echo "child $?"`}}, "")
		if err != nil || !res.TimedOut || out != "" {
			t.Errorf("a stopped child never continued: %v %+v stdout %q stderr %q, want a timeout and no output", err, res, out, errOut)
		}

		// The command exits and leaves the stopped child (which ignores
		// SIGHUP): the child dies with the tree and never runs again.
		start := time.Now()
		res, out, errOut = x.sh(t, stopped+`exit 3`)
		if res.ExitCode != 3 || res.Signal != 0 || res.TimedOut || strings.Contains(out, "resumed") {
			t.Errorf("a command that leaves a stopped child: %+v stdout %q stderr %q after %s, want exit 3 and the child never resumed",
				res, out, errOut, time.Since(start).Round(time.Millisecond))
		}
	})

	t.Run("stdout stderr stdin", func(t *testing.T) {
		res, out, errOut := x.sh(t, "echo out1; echo err1 >&2; echo out2; echo err2 >&2; exit 3")
		if out != "out1\nout2\n" || errOut != "err1\nerr2\n" || res.ExitCode != 3 {
			t.Errorf("got stdout %q stderr %q %+v", out, errOut, res)
		}
		res, out, _, err := x.exec(t, guest.ExecRequest{Argv: []string{"cat"}}, "from stdin\n")
		if err != nil || out != "from stdin\n" || res.ExitCode != 0 {
			t.Errorf("cat: %v %q %+v", err, out, res)
		}
		big := strings.Repeat("0123456789abcdef", 1<<16) // 1 MiB through and back
		res, out, _, err = x.exec(t, guest.ExecRequest{Argv: []string{"cat"}}, big)
		if err != nil || out != big || res.ExitCode != 0 {
			t.Errorf("cat of 1 MiB: %v, %d bytes back, %+v", err, len(out), res)
		}
	})

	t.Run("terminal", func(t *testing.T) {
		// The command's own terminal, as login hands one over: its user's,
		// so that it opens by name too.
		res, out, _, err := x.exec(t, guest.ExecRequest{TTY: true, Argv: []string{"sh", "-c", `t=$(tty) && echo reopened > "$t" && stat -c %u "$t"`}}, "")
		if err != nil || res.ExitCode != 0 || !strings.Contains(out, "reopened") || !strings.Contains(out, fmt.Sprintf("\n%d", s.h.UID)) {
			t.Errorf("reopening the terminal by name: %v %+v %q", err, res, out)
		}
	})

	t.Run("terminal process", func(t *testing.T) {
		// A long-running command on a terminal, driven as a person would:
		// the terminal is its stdin, stdout and stderr and has the size
		// asked for, typed input reaches it, a resize reaches it as
		// SIGWINCH, the end of input reads as end of file, and a kill ends
		// its whole tree.
		const script = `for fd in 0 1 2; do if test -t $fd; then echo "isatty$fd yes"; else echo "isatty$fd no"; fi; done
echo "size $(stty size)"
t=$(tty)
if [ "$(stat -c %d "$t")" = "$(stat -c %d /dev/pts)" ]; then echo "devpts own"; else echo "devpts other $t"; fi
echo "pts $(ls /dev/pts | tr '\n' ' ')"
echo "mode $(stat -c %a "$t") mount $(grep ' /dev/pts ' /proc/self/mounts)"
echo ready
read line; echo "got:$line"
w=0; trap 'w=$((w+1))' WINCH
echo armed
while [ $w = 0 ]; do sleep 0.05; done
echo "winch $(stty size)"
cat; echo "eof $?"
sleep 1234 & sleep 1234 &
echo children
wait`
		inR, inW := io.Pipe()
		defer inW.Close()
		var out syncBuffer
		ctx, cancel := context.WithTimeout(t.Context(), execTimeout)
		defer cancel()
		p, err := x.conn.Start(ctx, guest.ExecRequest{TTY: true, Rows: 30, Cols: 100, Env: x.env, Argv: []string{"sh", "-c", script}}, inR, &out, nil)
		if err != nil {
			t.Fatalf("starting a command on a terminal: %v", err)
		}
		defer p.Kill()
		waitFor := func(want string) {
			t.Helper()
			if !eventually(promptly, func() bool { return strings.Contains(out.String(), want) }) {
				t.Fatalf("the terminal never showed %q; it shows %q", want, out.String())
			}
		}
		waitFor("ready")
		for _, want := range []string{"isatty0 yes", "isatty1 yes", "isatty2 yes", "size 30 100", "devpts own"} {
			if !strings.Contains(out.String(), want) {
				t.Errorf("the terminal shows %q, want %q", out.String(), want)
			}
		}
		// The terminal is its user's alone (others may neither read nor
		// write it), and a devpts of the sandbox's own holds only its own
		// terminals.
		if _, mode, ok := strings.Cut(out.String(), "\nmode "); !ok || !strings.HasPrefix(mode, "6") || mode[2] != '0' {
			t.Errorf("the terminal's mode and devpts: %q, want 6x0", mode)
		} else {
			mode, _, _ = strings.Cut(mode, "\r")
			t.Logf("terminal %s", mode)
		}
		if _, pts, ok := strings.Cut(out.String(), "\npts "); ok {
			pts, _, _ = strings.Cut(pts, "\r")
			for _, e := range strings.Fields(pts) {
				if _, err := strconv.Atoi(e); err != nil && e != "ptmx" {
					t.Errorf("/dev/pts holds %q", e)
				}
			}
		}
		io.WriteString(inW, "hello there\n")
		waitFor("got:hello there")
		waitFor("armed")
		if err := p.Resize(40, 120); err != nil {
			t.Fatalf("Resize: %v", err)
		}
		waitFor("winch 40 120")
		// The end of input types ^D: cat, blocked in read(2), reads end of
		// file. (gVisor does not report a lone ^D to poll(2), so a program
		// that polls first, as busybox's read does, would wait on.)
		inW.Close()
		waitFor("eof 0")
		waitFor("children")
		if err := p.Kill(); err != nil {
			t.Fatalf("Kill: %v", err)
		}
		res, err := p.Wait(ctx)
		if err != nil || !res.Canceled || res.StderrBytes != 0 {
			t.Errorf("the killed command: %v %+v, want it canceled, with no stderr apart from the terminal", err, res)
		}
		if left := x.mustSh(t, `cat /proc/[0-9]*/cmdline 2>/dev/null | tr '\0' ' '`); strings.Contains(left, "sleep 1234") {
			t.Errorf("the killed command's children still run: %q", left)
		}
		// A command without a terminal cannot be resized.
		var plain syncBuffer
		q, err := x.conn.Start(ctx, guest.ExecRequest{Env: x.env, Argv: []string{"sh", "-c", "test -t 0 || echo no tty; read line; echo got:$line"}}, strings.NewReader("x\n"), &plain, nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := q.Resize(40, 120); !errors.Is(err, guest.ErrInvalid) {
			t.Errorf("resizing a command without a terminal: %v, want ErrInvalid", err)
		}
		res, err = q.Wait(ctx)
		if err != nil || res.ExitCode != 0 || plain.String() != "no tty\ngot:x\n" {
			t.Errorf("a command without a terminal: %v %+v %q", err, res, plain.String())
		}
	})

	t.Run("environment", func(t *testing.T) {
		if os.Getenv(s.canary) == "" {
			t.Fatal("the canary is not set in this process")
		}
		env := []string{"PATH=/usr/bin:/bin", "ONLY=this one", "EMPTY="}
		res, out, _, err := x.exec(t, guest.ExecRequest{Argv: []string{"env"}, Env: env}, "")
		if err != nil || res.ExitCode != 0 {
			t.Fatalf("env: %v %+v", err, res)
		}
		got := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
		slices.Sort(got)
		want := slices.Sorted(slices.Values(env))
		if !slices.Equal(got, want) {
			t.Errorf("env inside: %q, want exactly %q", got, want)
		}
		// Nothing of this process's environment, nor the guest's token,
		// anywhere a command can read.
		_, out, errOut := x.sh(t, "cat /proc/self/environ; echo; cat /proc/1/environ; echo; ls /proc | grep -E '^[0-9]+$' | while read p; do cat /proc/$p/environ 2>/dev/null; echo; done")
		for _, secret := range []string{s.canary, os.Getenv(s.canary), x.token} {
			if strings.Contains(out+errOut, secret) {
				t.Errorf("%.30q is readable inside the sandbox", secret)
			}
		}
	})

	t.Run("workspace", func(t *testing.T) {
		if out := x.mustSh(t, "pwd"); out != sandbox.WorkspaceDir+"\n" {
			t.Errorf("default working directory %q", out)
		}
		content := "from the host " + randHex(8) + "\n"
		hostFile := filepath.Join(x.req.Files, "from-host.txt")
		if err := os.WriteFile(hostFile, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		if out := x.mustSh(t, "cat /workspace/from-host.txt"); out != content {
			t.Errorf("a host file inside: %q, want %q", out, content)
		}
		inside := "from the sandbox " + randHex(8)
		x.mustSh(t, `mkdir -p /workspace/sub && echo "$1" > /workspace/sub/from-sandbox.txt`, inside)
		p := filepath.Join(x.req.Files, "sub", "from-sandbox.txt")
		data, err := os.ReadFile(p)
		if err != nil || string(data) != inside+"\n" {
			t.Fatalf("a sandbox file on the host: %v %q", err, data)
		}
		var st syscall.Stat_t
		if err := syscall.Lstat(p, &st); err != nil {
			t.Fatal(err)
		}
		if int(st.Uid) != s.h.UID || int(st.Gid) != s.h.GID {
			t.Errorf("a file written inside is owned by %d:%d on the host, want %d:%d", st.Uid, st.Gid, s.h.UID, s.h.GID)
		}
	})

	t.Run("workspace is nosuid nodev", func(t *testing.T) {
		mounts := parseMountinfo(x.mustSh(t, "cat /proc/self/mountinfo"))
		ws, ok := findMount(mounts, sandbox.WorkspaceDir)
		if !ok {
			t.Fatalf("no mount at %s inside", sandbox.WorkspaceDir)
		}
		if !s.h.Quirks.HiddenMountFlags {
			for _, f := range []string{"rw", "nosuid", "nodev"} {
				if !slices.Contains(ws.options, f) {
					t.Errorf("%s is mounted %v, without %s", sandbox.WorkspaceDir, ws.options, f)
				}
			}
		} else {
			t.Logf("%s inside shows %v (flags hidden by the runtime); checking nodev by behaviour", sandbox.WorkspaceDir, ws.options)
		}
		// nodev by behaviour: a /dev/null node the host put in the
		// workspace opens on the host (control) but not inside. The
		// engine's device cgroup allows /dev/null, so only nodev stops it.
		// A runtime that serves device nodes from its own emulation opens
		// its /dev/null there; what must not open is a device it does not
		// emulate (/dev/kmsg: the host's, read-only here).
		name, major, minor, flag, probe := "nulldev", uint32(1), uint32(3), os.O_WRONLY, "echo x > /workspace/nulldev"
		if s.h.Quirks.EmulatedDeviceNodes {
			name, major, minor, flag, probe = "kmsgdev", 1, 11, os.O_RDONLY|syscall.O_NONBLOCK, "head -c1 /workspace/kmsgdev"
		}
		node := filepath.Join(x.req.Files, name)
		if err := syscall.Mknod(node, syscall.S_IFCHR|0o666, int(mkdev(major, minor))); err != nil {
			t.Fatalf("mknod: %v", err)
		}
		defer os.Remove(node)
		os.Chmod(node, 0o666)
		if f, err := os.OpenFile(node, flag, 0); err != nil {
			t.Fatalf("control: the node does not open on the host: %v", err)
		} else {
			f.Close()
		}
		if res, _, errOut := x.sh(t, probe); res.ExitCode == 0 {
			t.Errorf("a device node (%d:%d) in the workspace opens inside the sandbox (%s)", major, minor, errOut)
		} else if s.h.Quirks.EmulatedDeviceNodes {
			t.Logf("%s: device nodes on the workspace are the runtime's own (documented quirk); %d:%d refused: %s", s.b.Name(), major, minor, strings.TrimSpace(errOut))
		}
	})

	t.Run("read-only root", func(t *testing.T) {
		mounts := parseMountinfo(x.mustSh(t, "cat /proc/self/mountinfo"))
		if root, ok := findMount(mounts, "/"); !ok || !slices.Contains(root.options, "ro") {
			t.Errorf("/ is mounted %v, not ro", root.options)
		}
		if res, _, _ := x.sh(t, "touch /etc/agentbox-probe || mkdir /agentbox-probe"); res.ExitCode == 0 {
			t.Errorf("a file could be made on the root")
		}
		// Directories of the root that the user owns (its home) are where
		// only read-only-ness stops a write.
		owned := x.mustSh(t, "find / -xdev -type d -user $(id -u) 2>/dev/null; true")
		for _, dir := range strings.Fields(owned) {
			if dir == sandbox.WorkspaceDir || strings.HasPrefix(dir, sandbox.WorkspaceDir+"/") {
				continue
			}
			if res, _, _ := x.sh(t, `touch "$1/agentbox-probe"`, dir); res.ExitCode == 0 {
				t.Errorf("wrote into %s, which is on the read-only root", dir)
			}
		}
	})

	t.Run("tmp", func(t *testing.T) {
		if out := x.mustSh(t, "echo scratch > /tmp/probe && cat /tmp/probe && rm /tmp/probe"); out != "scratch\n" {
			t.Errorf("/tmp: %q", out)
		}
		mounts := parseMountinfo(x.mustSh(t, "cat /proc/self/mountinfo"))
		tmp, ok := findMount(mounts, "/tmp")
		if !ok || tmp.fstype != "tmpfs" {
			t.Fatalf("/tmp is not a tmpfs: %+v", tmp)
		}
		if !s.h.Quirks.HiddenMountFlags {
			for _, f := range []string{"rw", "nosuid", "nodev"} {
				if !slices.Contains(tmp.options, f) {
					t.Errorf("/tmp is mounted %v, without %s", tmp.options, f)
				}
			}
		}
		out := strings.Fields(x.mustSh(t, "stat -f -c '%b %S' /tmp"))
		if len(out) == 2 {
			blocks, _ := strconv.ParseInt(out[0], 10, 64)
			bsize, _ := strconv.ParseInt(out[1], 10, 64)
			if size := blocks * bsize; size != x.req.Spec.Limits.TmpBytes {
				t.Errorf("/tmp holds %d bytes, want %d", size, x.req.Spec.Limits.TmpBytes)
			}
		} else {
			t.Errorf("stat -f /tmp: %q", out)
		}
	})

	t.Run("no network", func(t *testing.T) {
		out := x.mustSh(t, "cat /proc/net/dev")
		var ifaces []string
		for _, line := range strings.Split(out, "\n") {
			if name, _, ok := strings.Cut(line, ":"); ok {
				ifaces = append(ifaces, strings.TrimSpace(name))
			}
		}
		if !slices.Equal(ifaces, []string{"lo"}) {
			t.Errorf("network interfaces inside: %q, want only lo", ifaces)
		}
	})
}

// mkdev makes a device number the way the kernel's new_encode_dev does.
func mkdev(major, minor uint32) uint64 {
	return uint64(minor&0xff) | uint64(major&0xfff)<<8 | uint64(minor&^0xff)<<12
}

// testLimits: a bounded fork bomb stops at the pids limit and the host
// stays responsive; an allocation beyond the memory limit is killed. Each
// runs in a sandbox of its own, since on some runtimes it ends the sandbox.
func testLimits(t *testing.T, s *suite) {
	t.Run("pids", func(t *testing.T) {
		t.Parallel()
		limits := sandbox.Limits{CPUs: 1, MemoryBytes: 256 << 20, Pids: 128, TmpBytes: 16 << 20}
		x := s.create(t, boxOpts{limits: &limits})
		// Bounded: at most 1000 forks, each a sleep that the command's
		// end kills.
		const most = 1000
		res, out, errOut, err := x.exec(t, guest.ExecRequest{
			Argv:    []string{"sh", "-c", `n=0; while [ $n -lt $0 ]; do sleep 300 & n=$((n+1)); echo $n; done; echo all`, strconv.Itoa(most)},
			Timeout: 60 * time.Second,
		}, "")
		lines := strings.Fields(out)
		n := 0
		if len(lines) > 0 {
			n, _ = strconv.Atoi(lines[len(lines)-1])
		}
		t.Logf("%s: with pids %d the fork bomb started %d processes, then: %v %+v %q", s.b.Name(), limits.Pids, n, err, res, lastLine(errOut))
		if slices.Contains(lines, "all") || n >= int(limits.Pids) {
			t.Errorf("the fork bomb was not capped: %d forks under a pids limit of %d", n, limits.Pids)
		}
		if n == 0 {
			t.Errorf("the fork bomb could not fork at all: the probe proves nothing (%+v %q)", res, errOut)
		}
		start := time.Now()
		if err := exec.Command("true").Run(); err != nil || time.Since(start) > 5*time.Second {
			t.Errorf("the host cannot fork promptly: %v after %s", err, time.Since(start))
		}
		if res.Lost && s.h.Quirks.PidsLimitEndsSandbox {
			t.Logf("%s: reaching the pids limit took the whole sandbox down (documented quirk)", s.b.Name())
			x.dumpLogs = true
			assertEnds(t, s, x)
			return
		}
		if err != nil || res.Lost || res.ExitCode == 0 {
			t.Fatalf("the fork bomb ended %v %+v, want a failed fork", err, res)
		}
		// The bomb's processes die with its command: the budget recovers.
		var last string
		if !eventually(promptly, func() bool {
			res, out, errOut, err := x.exec(t, guest.ExecRequest{Argv: []string{"sh", "-c", "sleep 0; echo ok"}}, "")
			last = fmt.Sprintf("%v %+v %q %q", err, res, out, errOut)
			return err == nil && out == "ok\n"
		}) {
			t.Errorf("the sandbox does not recover after the fork bomb: %s", last)
		}
	})

	t.Run("memory", func(t *testing.T) {
		t.Parallel()
		limits := sandbox.Limits{CPUs: 1, MemoryBytes: 128 << 20, Pids: 512, TmpBytes: 16 << 20}
		x := s.create(t, boxOpts{limits: &limits})
		if out := x.mustSh(t, "echo alive"); out != "alive\n" {
			t.Fatalf("before: %q", out)
		}
		// One allocation of twice the limit, touched by reading into it.
		bs := strconv.FormatInt(2*limits.MemoryBytes, 10)
		res, _, errOut, err := x.exec(t, guest.ExecRequest{Argv: []string{"dd", "if=/dev/zero", "of=/dev/null", "bs=" + bs, "count=1"}}, "")
		t.Logf("%s: allocating %s bytes under a memory limit of %d: %v %+v %q", s.b.Name(), bs, limits.MemoryBytes, err, res, lastLine(errOut))
		switch {
		case err == nil && res.Signal == int(syscall.SIGKILL) && res.ExitCode == 128+int(syscall.SIGKILL):
			if out := x.mustSh(t, "echo alive"); out != "alive\n" {
				t.Errorf("the sandbox after the OOM kill: %q", out)
			}
		case res.Lost && s.h.Quirks.OOMEndsSandbox:
			t.Logf("%s: the OOM took the whole sandbox down (documented quirk)", s.b.Name())
			x.dumpLogs = true
			assertEnds(t, s, x)
		default:
			t.Errorf("an allocation beyond the memory limit: %v %+v, want SIGKILL", err, res)
		}
	})
}

// assertEnds checks that a sandbox whose guest connection was lost stops
// running promptly.
func assertEnds(t *testing.T, s *suite, x *box) {
	t.Helper()
	var info sandbox.Info
	var err error
	if !eventually(promptly, func() bool {
		info, err = s.b.Inspect(t.Context(), x.info.Ref)
		return err != nil || info.State != sandbox.StateRunning
	}) {
		t.Errorf("the exec was lost but the sandbox still runs %s later: %+v", promptly, info)
	}
}

// grepLine returns the first line of text that starts with prefix.
func grepLine(text, prefix string) string {
	for _, l := range strings.Split(text, "\n") {
		if strings.HasPrefix(l, prefix) {
			return l
		}
	}
	return ""
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}

// testReplacement: removing a sandbox (running, mid-exec) and creating a
// new one on the same workspace keeps the workspace and nothing else.
func testReplacement(t *testing.T, s *suite) {
	files := s.newFiles(t)
	a := s.create(t, boxOpts{files: files})
	a.mustSh(t, "echo kept > /workspace/kept && mkdir -p /workspace/dir/sub && echo deep > /workspace/dir/sub/file && echo gone > /tmp/gone")
	long := newSignalWriter("running")
	done := make(chan guest.ExecResult, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), execTimeout)
		defer cancel()
		res, _ := a.conn.Exec(ctx, guest.ExecRequest{Argv: []string{"sh", "-c", "echo running; exec sleep 1000"}, Env: a.env}, nil, long, nil)
		done <- res
	}()
	select {
	case <-long.ready:
	case <-time.After(promptly):
		t.Fatal("the long command did not start")
	}
	start := time.Now()
	if err := s.b.Remove(t.Context(), a.info.Ref); err != nil {
		t.Fatalf("Remove of a running sandbox: %v", err)
	}
	t.Logf("%s: Remove of a running sandbox took %s", s.b.Name(), time.Since(start).Round(time.Millisecond))
	select {
	case res := <-done:
		if !res.Lost {
			t.Errorf("a command of a removed sandbox ended %+v, want Lost", res)
		}
	case <-time.After(promptly):
		t.Errorf("a command of a removed sandbox has not ended %s later", promptly)
	}
	checkGone(t, s, a)

	b := s.create(t, boxOpts{files: files})
	if out := b.mustSh(t, "cat /workspace/kept /workspace/dir/sub/file"); out != "kept\ndeep\n" {
		t.Errorf("the workspace after replacement: %q", out)
	}
	if res, out, _ := b.sh(t, "ls -A /tmp"); res.ExitCode != 0 || strings.TrimSpace(out) != "" {
		t.Errorf("/tmp of the new sandbox is not empty: %q %+v", out, res)
	}
	if out := b.mustSh(t, "ps -o args"); strings.Contains(out, "sleep 1000") {
		t.Errorf("a process of the old sandbox runs in the new one:\n%s", out)
	}
}

// testKilledFromOutside: the environment dies under a running command
// (docker kill); the command ends Lost promptly instead of hanging.
func testKilledFromOutside(t *testing.T, s *suite) {
	x := s.create(t, boxOpts{})
	w := newSignalWriter("started")
	done := make(chan guest.ExecResult, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), execTimeout)
		defer cancel()
		res, _ := x.conn.Exec(ctx, guest.ExecRequest{Argv: []string{"sh", "-c", "echo started; exec sleep 1000"}, Env: x.env}, nil, w, nil)
		done <- res
	}()
	select {
	case <-w.ready:
	case <-time.After(promptly):
		t.Fatal("the command did not start")
	}
	start := time.Now()
	if err := s.h.Kill(t.Context(), x.info.Ref); err != nil {
		t.Fatalf("killing the environment from outside: %v", err)
	}
	select {
	case res := <-done:
		t.Logf("%s: killed from outside; the running exec ended %s later: %+v", s.b.Name(), time.Since(start).Round(time.Millisecond), res)
		if !res.Lost {
			t.Errorf("the exec ended %+v, want Lost", res)
		}
	case <-time.After(promptly):
		t.Fatalf("the exec has not ended %s after the kill", promptly)
	}
	select {
	case <-x.conn.Done():
	case <-time.After(promptly):
		t.Errorf("the guest connection is still up %s after the kill", promptly)
	}
	if info, err := s.b.Inspect(t.Context(), x.info.Ref); err == nil && info.State == sandbox.StateRunning {
		t.Errorf("Inspect after the kill: %+v", info)
	}
	if err := s.b.Remove(t.Context(), x.info.Ref); err != nil {
		t.Errorf("Remove after the kill: %v", err)
	}
	checkGone(t, s, x)
}

// testCreateFailures: bad requests are refused with ErrInvalid, a second
// sandbox with a live one's id with ErrConflict, and none leaves anything.
func testCreateFailures(t *testing.T, s *suite) {
	ctx := t.Context()
	assertNothing := func(t *testing.T, id string) {
		t.Helper()
		got, err := s.b.List(ctx, map[string]string{sandbox.LabelSandbox: id})
		if err != nil || len(got) != 0 {
			t.Errorf("a failed create left %+v %v", got, err)
		}
		if left := s.leftovers(t, id); len(left) != 0 {
			t.Errorf("a failed create left %v in the engine", left)
		}
	}

	t.Run("unknown image", func(t *testing.T) {
		req, _, _, _ := s.request(t, boxOpts{})
		req.Spec.Image = "agentbox-test/no-such-image:" + randHex(4)
		_, err := s.b.Create(ctx, req)
		if !errors.Is(err, errdefs.ErrInvalid) || !strings.Contains(fmt.Sprint(err), req.Spec.Image) {
			t.Errorf("Create with an unknown image: %v, want ErrInvalid naming the image", err)
		}
		t.Logf("unknown image: %v", err)
		assertNothing(t, req.ID)
	})

	t.Run("invalid requests", func(t *testing.T) {
		for name, mutate := range map[string]func(*sandbox.CreateRequest){
			"root user":         func(r *sandbox.CreateRequest) { r.UID = 0 },
			"root group":        func(r *sandbox.CreateRequest) { r.GID = 0 },
			"no id":             func(r *sandbox.CreateRequest) { r.ID = "" },
			"missing files":     func(r *sandbox.CreateRequest) { r.Files = filepath.Join(r.Files, "missing") },
			"relative files":    func(r *sandbox.CreateRequest) { r.Files = "files" },
			"missing run dir":   func(r *sandbox.CreateRequest) { r.RunDir = filepath.Join(r.RunDir, "missing") },
			"missing guest":     func(r *sandbox.CreateRequest) { r.Guest = filepath.Join(r.RunDir, "no-guest") },
			"no image":          func(r *sandbox.CreateRequest) { r.Spec.Image = "" },
			"absurd pids":       func(r *sandbox.CreateRequest) { r.Spec.Limits.Pids = 1 },
			"absurd memory":     func(r *sandbox.CreateRequest) { r.Spec.Limits.MemoryBytes = 1 << 10 },
			"another backend":   func(r *sandbox.CreateRequest) { r.Spec.Backend = "no-such-backend" },
			"files is a file":   func(r *sandbox.CreateRequest) { r.Files = s.h.Guest },
			"guest is a folder": func(r *sandbox.CreateRequest) { r.Guest = r.RunDir },
			"guest as the user": func(r *sandbox.CreateRequest) { r.GuestUID, r.GuestGID = r.UID, r.GID },
			"guest as root":     func(r *sandbox.CreateRequest) { r.GuestUID = -1 },
		} {
			t.Run(name, func(t *testing.T) {
				req, _, _, _ := s.request(t, boxOpts{})
				id := req.ID
				mutate(&req)
				if _, err := s.b.Create(ctx, req); !errors.Is(err, errdefs.ErrInvalid) {
					t.Errorf("Create: %v, want ErrInvalid", err)
				}
				assertNothing(t, id)
			})
		}
	})

	t.Run("cancelled", func(t *testing.T) {
		req, _, _, _ := s.request(t, boxOpts{})
		cctx, cancel := context.WithCancel(ctx)
		cancel()
		if _, err := s.b.Create(cctx, req); err == nil {
			t.Errorf("Create with a cancelled context succeeded")
		}
		assertNothing(t, req.ID)
	})

	t.Run("duplicate id", func(t *testing.T) {
		x := s.create(t, boxOpts{})
		os.WriteFile(filepath.Join(x.req.Files, "mark"), []byte("first\n"), 0o644)
		req, _, _, _ := s.request(t, boxOpts{})
		req.ID = x.req.ID
		if _, err := s.b.Create(ctx, req); !errors.Is(err, errdefs.ErrConflict) {
			t.Errorf("a second Create of %s: %v, want ErrConflict", x.req.ID, err)
		}
		got, err := s.b.List(ctx, map[string]string{sandbox.LabelSandbox: x.req.ID})
		if err != nil || len(got) != 1 || got[0].Ref != x.info.Ref {
			t.Errorf("after the refused duplicate: %+v %v, want only %s", got, err, x.info.Ref)
		}
		// The failed create's rollback must not touch the first sandbox.
		if out := x.mustSh(t, "cat /workspace/mark"); out != "first\n" {
			t.Errorf("the first sandbox's workspace after the refused duplicate: %q", out)
		}
		if err := s.b.Remove(ctx, x.info.Ref); err != nil {
			t.Fatal(err)
		}
		checkGone(t, s, x)
	})
}
