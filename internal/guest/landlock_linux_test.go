package guest

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	ll "github.com/landlock-lsm/go-landlock/landlock/syscall"

	"github.com/agentbox/agentbox/internal/testutil/skip"
)

// landlockProbe runs one operation and prints "ok" or "denied:ERRNO". It
// is Python because busybox and the shell cannot bind, connect to an
// abstract socket, or tell one errno from another.
const landlockProbe = `
import errno, os, signal, socket, sys
op, arg = sys.argv[1], sys.argv[2]
try:
    if op == "write":
        with open(arg, "w") as f:
            f.write("x")
    elif op == "rename":
        os.rename(arg + "/a/f", arg + "/b/f")
    elif op == "connect":
        socket.create_connection(("127.0.0.1", int(arg)), timeout=5).close()
    elif op == "bind":
        socket.socket().bind(("127.0.0.1", 0))
    elif op == "abstract":
        s = socket.socket(socket.AF_UNIX)
        s.connect("\0" + arg)
    elif op == "kill":
        os.kill(int(arg), signal.SIGTERM)
    print("ok")
except OSError as e:
    print("denied:" + errno.errorcode.get(e.errno, str(e.errno)))
`

// hostLandlockABI is this kernel's Landlock ABI version, 0 without it.
func hostLandlockABI() int {
	v, err := ll.LandlockGetABIVersion()
	if err != nil {
		return 0
	}
	return v
}

// TestLandlock runs the same probes through a guest with
// --landlock=required and, as the control that shows each probe can
// work, through a guest without Landlock. Both are plain processes on
// the host, in the host's network namespace, so the test's own loopback
// listeners, abstract socket and processes are within reach of the
// commands unless Landlock stops them; what the commands did is judged
// on the host.
func TestLandlock(t *testing.T) {
	t.Parallel()
	if abi := hostLandlockABI(); abi < 6 {
		skip.OrFail(t, fmt.Sprintf("the kernel's Landlock ABI is %d; this test needs 6", abi))
	}
	python := "/usr/bin/python3"
	if _, err := os.Stat(python); err != nil {
		skip.OrFail(t, "no "+python+" for the probes")
	}

	// Host-side targets.
	listen := func() (*net.TCPListener, int) {
		ln, err := net.ListenTCP("tcp", &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { ln.Close() })
		return ln, ln.Addr().(*net.TCPAddr).Port
	}
	blocked, blockedPort := listen()
	allowed, allowedPort := listen()
	abstract := newMarker()
	uln, err := net.ListenUnix("unix", &net.UnixAddr{Name: "@" + abstract, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { uln.Close() })
	outside, err := os.MkdirTemp("/var/tmp", "abg-landlock-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(outside) })
	inside, err := os.MkdirTemp("/tmp", "abg-landlock-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(inside) })
	for _, d := range []string{"a", "b"} {
		os.Mkdir(filepath.Join(inside, d), 0o755)
	}
	os.WriteFile(filepath.Join(inside, "a", "f"), nil, 0o644)
	victim := exec.Command("sleep", "1000")
	if err := victim.Start(); err != nil {
		t.Fatal(err)
	}
	victimDone := make(chan error, 1)
	go func() { victimDone <- victim.Wait() }()
	t.Cleanup(func() {
		victim.Process.Kill()
		<-victimDone
	})

	locked := startHostGuest(t, "--landlock=required", fmt.Sprintf("--landlock-tcp-connect=%d", allowedPort))
	plain := startHostGuest(t)
	st := locked.conn.Info().Landlock
	if st.Mode != LandlockRequired || !st.Enforced || st.ABI < 6 || !strings.Contains(st.Detail, "signals scoped") {
		t.Fatalf("landlock status %+v, want required and enforced with scoping", st)
	}
	if got := plain.conn.Info().Landlock; got != (LandlockStatus{}) {
		t.Errorf("guest without --landlock says %+v", got)
	}

	probe := func(t *testing.T, g *hostGuest, op, arg string) string {
		t.Helper()
		res, out, errOut, err := run(t, g.conn, ExecRequest{Argv: []string{python, "-c", landlockProbe, op, arg}, Env: hostEnv, Dir: "/"}, "")
		if err != nil || res.ExitCode != 0 {
			t.Fatalf("probe %s %s: %v %+v %q", op, arg, err, res, errOut)
		}
		return strings.TrimSpace(out)
	}
	// pending says whether a connection waits on ln, without waiting: a
	// connect on loopback is in the accept queue when it returns.
	pending := func(ln *net.TCPListener) bool {
		f, err := ln.File() // a listener has no RawConn.Read
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		// Fd makes the open file, which the listener shares, blocking:
		// make it non-blocking again, for this accept and the listener.
		fd := int(f.Fd())
		syscall.SetNonblock(fd, true)
		nfd, _, aerr := syscall.Accept4(fd, syscall.SOCK_CLOEXEC)
		if aerr != nil {
			if !errors.Is(aerr, syscall.EAGAIN) {
				t.Fatal(aerr)
			}
			return false
		}
		syscall.Close(nfd)
		return true
	}
	alive := func() bool {
		select {
		case err := <-victimDone:
			victimDone <- err
			return false
		default:
			return victim.Process.Signal(syscall.Signal(0)) == nil
		}
	}

	tests := []struct {
		name         string
		op, arg      string
		locked, open string                          // the probe's answer with and without Landlock
		setup        func()                          // before each probe
		check        func(t *testing.T, locked bool) // the host's view after the probe
	}{
		{name: "write outside the writable places", op: "write", arg: filepath.Join(outside, "f"), locked: "denied:EACCES", open: "ok",
			check: func(t *testing.T, locked bool) {
				if _, err := os.Stat(filepath.Join(outside, "f")); (err == nil) == locked {
					t.Errorf("file written outside: %v", err == nil)
				}
			}},
		{name: "write /proc", op: "write", arg: "/proc/self/comm", locked: "denied:EACCES", open: "ok"},
		{name: "write /tmp", op: "write", arg: filepath.Join(inside, "f"), locked: "ok", open: "ok"},
		{name: "write /dev/null", op: "write", arg: "/dev/null", locked: "ok", open: "ok"},
		{name: "rename across directories in /tmp", op: "rename", arg: inside, locked: "ok", open: "ok",
			setup: func() {
				os.Remove(filepath.Join(inside, "b", "f"))
				os.WriteFile(filepath.Join(inside, "a", "f"), nil, 0o644)
			}},
		{name: "TCP connect", op: "connect", arg: fmt.Sprint(blockedPort), locked: "denied:EACCES", open: "ok",
			check: func(t *testing.T, locked bool) {
				if pending(blocked) == locked {
					t.Errorf("connection reached the host listener: %v", !locked)
				}
			}},
		{name: "TCP connect to an allowed port", op: "connect", arg: fmt.Sprint(allowedPort), locked: "ok", open: "ok",
			check: func(t *testing.T, _ bool) {
				if !pending(allowed) {
					t.Error("no connection reached the allowed port")
				}
			}},
		{name: "TCP bind", op: "bind", locked: "denied:EACCES", open: "ok"},
		{name: "abstract unix socket outside", op: "abstract", arg: abstract, locked: "denied:EPERM", open: "ok"},
		// The guest's seccomp guard refuses this one with or without Landlock.
		{name: "signal the guest", op: "kill", arg: fmt.Sprint(locked.cmd.Process.Pid), locked: "denied:EPERM", open: "denied:EPERM"},
		// Last: the control kills the victim.
		{name: "signal a process outside", op: "kill", arg: fmt.Sprint(victim.Process.Pid), locked: "denied:EPERM", open: "ok",
			check: func(t *testing.T, locked bool) {
				if locked && !alive() {
					t.Error("the process outside was killed")
				}
				if !locked {
					waitFor(t, 5*time.Second, "the control to kill the process outside", func() bool { return !alive() })
				}
			}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.setup != nil {
				tt.setup()
			}
			if got := probe(t, locked, tt.op, tt.arg); got != tt.locked {
				t.Errorf("under Landlock: %s, want %s", got, tt.locked)
			}
			if tt.check != nil {
				tt.check(t, true)
			}
			if tt.setup != nil {
				tt.setup()
			}
			arg := tt.arg
			if tt.name == "signal the guest" {
				arg = fmt.Sprint(plain.cmd.Process.Pid)
			}
			if got := probe(t, plain, tt.op, arg); got != tt.open {
				t.Errorf("control without Landlock: %s, want %s", got, tt.open)
			}
			if tt.check != nil {
				tt.check(t, false)
			}
		})
	}
	// The guest itself is not restricted: it still serves.
	if _, err := locked.conn.Ping(t.Context()); err != nil {
		t.Fatal(err)
	}
}
