package guest

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// These tests run the real agentbox-guest binary as a child of the test
// process, outside any container, and talk to it over a real socket.

func TestExecBasics(t *testing.T) {
	t.Parallel()
	g := startHostGuest(t)
	dir := shortDir(t)
	tests := []struct {
		name       string
		req        ExecRequest
		stdin      string
		wantOut    string
		wantErrOut string
		wantCode   int
		wantSignal int
	}{
		{name: "echo", req: ExecRequest{Argv: []string{"echo", "hello", "world"}}, wantOut: "hello world\n"},
		{name: "stderr apart from stdout", req: ExecRequest{Argv: []string{"sh", "-c", "echo out; echo err >&2"}}, wantOut: "out\n", wantErrOut: "err\n"},
		{name: "exit code", req: ExecRequest{Argv: []string{"sh", "-c", "exit 7"}}, wantCode: 7},
		{name: "killed by a signal", req: ExecRequest{Argv: []string{"sh", "-c", "kill -TERM $$"}}, wantCode: 143, wantSignal: 15},
		{name: "stdin", req: ExecRequest{Argv: []string{"cat"}}, stdin: "line one\nline two\n", wantOut: "line one\nline two\n"},
		{name: "no stdin reads EOF", req: ExecRequest{Argv: []string{"cat"}}},
		{name: "environment exactly as given", req: ExecRequest{Argv: []string{"/usr/bin/env"}, Env: []string{"A=1", "B=two words"}}, wantOut: "A=1\nB=two words\n"},
		{name: "empty environment", req: ExecRequest{Argv: []string{"/usr/bin/env"}}},
		{name: "working directory", req: ExecRequest{Argv: []string{"pwd"}, Dir: dir}, wantOut: dir + "\n"},
		{name: "relative command in the working directory", req: ExecRequest{Argv: []string{"./x.sh"}, Dir: dir}, wantOut: "script\n"},
	}
	if err := os.WriteFile(dir+"/x.sh", []byte("#!/bin/sh\necho script\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req := tt.req
			if req.Env == nil && req.Argv[0] != "/usr/bin/env" {
				req.Env = hostEnv
			}
			if req.Dir == "" {
				req.Dir = "/"
			}
			res, out, errOut, err := run(t, g.conn, req, tt.stdin)
			if err != nil {
				t.Fatalf("exec: %v", err)
			}
			if out != tt.wantOut || errOut != tt.wantErrOut {
				t.Errorf("stdout %q stderr %q; want %q and %q", out, errOut, tt.wantOut, tt.wantErrOut)
			}
			if res.ExitCode != tt.wantCode || res.Signal != tt.wantSignal || res.TimedOut || res.Lost {
				t.Errorf("result %+v; want exit %d signal %d", res, tt.wantCode, tt.wantSignal)
			}
			if res.StdoutBytes != int64(len(tt.wantOut)) || res.StderrBytes != int64(len(tt.wantErrOut)) {
				t.Errorf("byte counts %d/%d; want %d/%d", res.StdoutBytes, res.StderrBytes, len(tt.wantOut), len(tt.wantErrOut))
			}
			if strings.Contains(out, canaryValue) {
				t.Errorf("the daemon's canary variable leaked into the command: %q", out)
			}
		})
	}
}

func TestExecStartErrors(t *testing.T) {
	t.Parallel()
	g := startHostGuest(t)
	dir := shortDir(t)
	missing := dir + "/missing"
	if err := os.WriteFile(dir+"/data.txt", []byte("data"), 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name     string
		req      ExecRequest
		wantCode int
		wantText string
	}{
		{"unknown command", ExecRequest{Argv: []string{"no-such-command-xyz"}, Env: hostEnv, Dir: "/"}, 127, "not found"},
		{"no PATH and no slash", ExecRequest{Argv: []string{"no-such-command-xyz"}, Dir: "/"}, 127, "not found"},
		{"missing absolute path", ExecRequest{Argv: []string{"/no/such/binary"}, Dir: "/"}, 127, "no such file"},
		{"not executable", ExecRequest{Argv: []string{"./data.txt"}, Dir: dir}, 126, "permission denied"},
		{"missing working directory", ExecRequest{Argv: []string{"true"}, Env: hostEnv, Dir: missing}, 126, "working directory"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res, _, _, err := run(t, g.conn, tt.req, "")
			var se *StartError
			if !errors.As(err, &se) {
				t.Fatalf("got %v (%+v), want a *StartError", err, res)
			}
			if res.ExitCode != tt.wantCode || se.ExitCode() != tt.wantCode {
				t.Errorf("exit code %d (%d), want %d", res.ExitCode, se.ExitCode(), tt.wantCode)
			}
			if !strings.Contains(strings.ToLower(err.Error()), tt.wantText) {
				t.Errorf("error %q does not say %q", err, tt.wantText)
			}
		})
	}
	// The connection survives failed starts.
	if res, out, _, err := run(t, g.conn, ExecRequest{Argv: []string{"echo", "ok"}, Env: hostEnv, Dir: "/"}, ""); err != nil || out != "ok\n" {
		t.Fatalf("exec after failed starts: %v %+v %q", err, res, out)
	}
	// A request the daemon can see is bad never reaches the guest.
	if _, err := g.conn.Exec(t.Context(), ExecRequest{}, nil, nil, nil); !errors.Is(err, ErrInvalid) {
		t.Errorf("empty argv: got %v, want ErrInvalid", err)
	}
}

func TestExecLargeStdinAndStdout(t *testing.T) {
	t.Parallel()
	g := startHostGuest(t)
	data := make([]byte, 3<<20+17)
	rand.Read(data)
	var out bytes.Buffer
	res, err := g.conn.Exec(t.Context(), ExecRequest{Argv: []string{"cat"}, Env: hostEnv, Dir: "/"}, bytes.NewReader(data), &out, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(out.Bytes(), data) {
		t.Fatalf("cat returned %d bytes, want the %d sent", out.Len(), len(data))
	}
	if res.ExitCode != 0 || res.StdoutBytes != int64(len(data)) {
		t.Errorf("result %+v", res)
	}
}

func TestOutputCap(t *testing.T) {
	t.Parallel()
	g := startHostGuest(t)
	const limit = 1 << 20
	const produced = 64 << 20
	var out, errOut bytes.Buffer
	p, err := g.conn.Start(t.Context(), ExecRequest{
		Argv:           []string{"sh", "-c", fmt.Sprintf("head -c %d /dev/zero; head -c %d /dev/zero >&2; echo done >&2", produced, produced)},
		Env:            hostEnv,
		Dir:            "/",
		MaxOutputBytes: limit,
	}, nil, &out, &errOut)
	if err != nil {
		t.Fatal(err)
	}
	res, err := p.Wait(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	marker := TruncationMarker(limit)
	want := append(make([]byte, limit), marker...)
	if !bytes.Equal(out.Bytes(), want) {
		t.Errorf("stdout is %d bytes ending %q; want %d zero bytes and the marker", out.Len(), tail(out.Bytes()), limit)
	}
	if !bytes.Equal(errOut.Bytes(), want) {
		t.Errorf("stderr is %d bytes ending %q; want %d zero bytes and the marker", errOut.Len(), tail(errOut.Bytes()), limit)
	}
	// The command ran to its end: it was drained, not killed.
	wantRes := ExecResult{StdoutTruncated: true, StderrTruncated: true, StdoutBytes: produced, StderrBytes: produced + 5}
	// The usage is the command tree's own: some CPU, some memory.
	if res.CPU() <= 0 || res.PeakMemBytes <= 0 {
		t.Errorf("usage: cpu %s, peak %d; want both reported", res.CPU(), res.PeakMemBytes)
	}
	res.Duration, res.UserCPU, res.SysCPU, res.PeakMemBytes = 0, 0, 0, 0
	if diff := cmp.Diff(wantRes, res); diff != "" {
		t.Errorf("result (-want +got):\n%s", diff)
	}
	// Neither side held more than the window.
	for i, q := range p.out {
		if q.maxBuffer > InitialWindow {
			t.Errorf("%s: the daemon buffered %d bytes, window is %d", Channel(i+1), q.maxBuffer, InitialWindow)
		}
	}
	if hwm := vmHWM(t, g.cmd.Process.Pid); hwm > 48<<10 {
		t.Errorf("the guest's peak memory is %d KiB after relaying a %d MiB flood", hwm, 2*produced>>20)
	}
}

func tail(b []byte) []byte {
	if len(b) > 60 {
		return b[len(b)-60:]
	}
	return b
}

// blockingWriter blocks every Write until released.
type blockingWriter struct {
	release chan struct{}
	mu      sync.Mutex
	n       int
}

func (w *blockingWriter) Write(p []byte) (int, error) {
	<-w.release
	w.mu.Lock()
	w.n += len(p)
	w.mu.Unlock()
	return len(p), nil
}

func TestFlowControlSlowReader(t *testing.T) {
	t.Parallel()
	g := startHostGuest(t)
	const produced = 16 << 20
	w := &blockingWriter{release: make(chan struct{})}
	p, err := g.conn.Start(t.Context(), ExecRequest{
		Argv: []string{"sh", "-c", fmt.Sprintf("head -c %d /dev/zero; echo finished >&2", produced)},
		Env:  hostEnv,
		Dir:  "/",
	}, nil, w, nil)
	if err != nil {
		t.Fatal(err)
	}
	q := p.out[0]
	received := func() int64 {
		q.mu.Lock()
		defer q.mu.Unlock()
		return q.received
	}
	// The guest sends until the window is used up...
	waitFor(t, 10*time.Second, "the first window of output", func() bool { return received() >= InitialWindow })
	// ...and then nothing more while the writer is stuck: the command is
	// blocked on its pipe and nothing piles up anywhere.
	deadline := time.Now().Add(300 * time.Millisecond)
	for time.Now().Before(deadline) {
		if n := received(); n > InitialWindow {
			t.Fatalf("the guest sent %d bytes with a window of %d and a stuck reader", n, InitialWindow)
		}
		select {
		case <-p.done:
			t.Fatal("the command finished although its output could not be delivered")
		default:
		}
		time.Sleep(10 * time.Millisecond)
	}
	close(w.release)
	res, err := p.Wait(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if w.n != produced || res.StdoutBytes != produced || res.ExitCode != 0 {
		t.Fatalf("writer got %d bytes, result %+v; want %d", w.n, res, produced)
	}
	if q.maxBuffer > InitialWindow {
		t.Errorf("the daemon buffered %d bytes, window is %d", q.maxBuffer, InitialWindow)
	}
}

// hostileScript starts a tree that resists being killed: it ignores
// SIGTERM, puts a child in a new session, double-forks, stops a child and
// starts one under nohup. Every process's command line holds the marker.
const hostileScript = `
S=$1
trap '' TERM INT HUP
setsid sh -c 'trap "" TERM; "$1" 1000' "$0-setsid" "$S" &
sh -c 'sh -c "trap \"\" TERM; \"\$1\" 1000" "$0-double" "$1" & exit 0' "$0" "$S" &
sh -c 'kill -STOP $$; "$1" 1000' "$0-stopped" "$S" &
nohup sh -c '"$1" 1000' "$0-nohup" "$S" >/dev/null 2>&1 &
echo ready
while :; do "$S" 1000; done
`

func TestTimeoutKillsHostileTree(t *testing.T) {
	t.Parallel()
	for _, grace := range []time.Duration{0, 300 * time.Millisecond} {
		t.Run(fmt.Sprintf("grace=%s", grace), func(t *testing.T) {
			t.Parallel()
			g := startHostGuest(t)
			marker := newMarker()
			sleep := markedSleep(t, marker)
			const timeout = 3 * time.Second
			var out syncBuffer
			p, err := g.conn.Start(t.Context(), ExecRequest{
				Argv:      []string{"sh", "-c", hostileScript, marker + "-main", sleep},
				Env:       hostEnv,
				Dir:       "/",
				Timeout:   timeout,
				KillGrace: grace,
			}, nil, &out, nil)
			if err != nil {
				t.Fatal(err)
			}
			// Control: the whole hostile tree is up before the deadline.
			want := []string{"-main", "-main-setsid", "-main-double", "-main-stopped", "-main-nohup", "-sleep"}
			var ps []proc
			defer func() {
				if t.Failed() {
					t.Logf("census: %+v", ps)
				}
			}()
			waitFor(t, timeout-500*time.Millisecond, "the hostile tree to start", func() bool {
				ps = census(marker)
				for _, w := range want {
					if !containsProc(ps, marker+w) {
						return false
					}
				}
				for _, p := range ps {
					if strings.Contains(p.cmdline, "-stopped") && p.state == "T" {
						return true
					}
				}
				return false
			})
			res, err := p.Wait(t.Context())
			if err != nil {
				t.Fatal(err)
			}
			// Checked at once, not polled: when the result arrives, the tree
			// is already dead and reaped.
			if left := census(marker); len(left) != 0 {
				t.Fatalf("processes left after the timeout: %+v", left)
			}
			if !res.TimedOut || res.Signal != int(syscall.SIGKILL) || res.ExitCode != 137 {
				t.Errorf("result %+v; want timed out, killed by SIGKILL", res)
			}
			if res.Duration < timeout || res.Duration > timeout+grace+3*time.Second {
				t.Errorf("duration %s for a timeout of %s", res.Duration, timeout)
			}
			if out.String() != "ready\n" {
				t.Errorf("stdout %q", out.String())
			}
		})
	}
}

func containsProc(ps []proc, s string) bool {
	for _, p := range ps {
		if strings.Contains(p.cmdline, s) {
			return true
		}
	}
	return false
}

func TestBackgroundProcessesDieWithTheCommand(t *testing.T) {
	t.Parallel()
	g := startHostGuest(t)
	marker := newMarker()
	sleep := markedSleep(t, marker)
	res, out, _, err := run(t, g.conn, ExecRequest{
		Argv: []string{"sh", "-c", `setsid "$1" 1000 >/dev/null 2>&1 & "$1" 1000 & echo started`, "sh", sleep},
		Env:  hostEnv,
		Dir:  "/",
	}, "")
	if err != nil || res.ExitCode != 0 || out != "started\n" {
		t.Fatalf("exec: %v %+v %q", err, res, out)
	}
	if left := census(marker); len(left) != 0 {
		t.Fatalf("background processes outlived their command: %+v", left)
	}
}

func TestUnwaitedChildrenAreReaped(t *testing.T) {
	t.Parallel()
	g := startHostGuest(t)
	const n = 1000
	fifo := shortDir(t) + "/release"
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	// n children wait for stdin to close; the shell becomes a cat that
	// never waits for them, so they stay zombies until the cat exits and
	// they pass to the reaper.
	script := fmt.Sprintf(`exec 3<&0
i=0; while [ $i -lt %d ]; do (read x <&3) & i=$((i+1)); done
echo spawned
exec cat "$0"`, n)
	stdinR, stdinW := io.Pipe()
	var out syncBuffer
	p, err := g.conn.Start(t.Context(), ExecRequest{Argv: []string{"sh", "-c", script, fifo}, Env: hostEnv, Dir: "/"}, stdinR, &out, nil)
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, "the children", func() bool { return out.String() == "spawned\n" })
	stdinW.Close()
	guestPid := g.cmd.Process.Pid
	// Control: the zombies exist.
	waitFor(t, 10*time.Second, fmt.Sprintf("%d zombies", n), func() bool {
		z := 0
		for _, p := range descendants(guestPid) {
			if p.state == "Z" {
				z++
			}
		}
		return z >= n
	})
	w, err := os.OpenFile(fifo, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	w.Close()
	res, err := p.Wait(t.Context())
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("exec: %v %+v", err, res)
	}
	for _, p := range descendants(guestPid) {
		if !strings.HasSuffix(p.cmdline, "agentbox-guest reaper") || p.state == "Z" {
			t.Errorf("left below the guest: %+v", p)
		}
	}
}

func TestConcurrentExecs(t *testing.T) {
	t.Parallel()
	g := startHostGuest(t)
	const n = 20
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			size := 100000 * (i + 1)
			res, out, errOut, err := run(t, g.conn, ExecRequest{
				Argv: []string{"sh", "-c", fmt.Sprintf(`echo "$0" >&2; head -c %d /dev/zero | tr '\0' x; exit $1`, size), fmt.Sprint("job", i), fmt.Sprint(i)},
				Env:  hostEnv,
				Dir:  "/",
			}, "")
			switch {
			case err != nil:
				errs <- fmt.Errorf("job %d: %v", i, err)
			case res.ExitCode != i || errOut != fmt.Sprintf("job%d\n", i) || out != strings.Repeat("x", size):
				errs <- fmt.Errorf("job %d: exit %d, stderr %q, %d bytes of stdout", i, res.ExitCode, errOut, len(out))
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

func TestSignalAndCancel(t *testing.T) {
	t.Parallel()
	g := startHostGuest(t)
	marker := newMarker()
	sleep := markedSleep(t, marker)

	p, err := g.conn.Start(t.Context(), ExecRequest{Argv: []string{sleep, "1000"}, Dir: "/"}, nil, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if p.Pid() <= 0 {
		t.Errorf("pid %d", p.Pid())
	}
	if err := p.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	res, err := p.Wait(t.Context())
	if err != nil || res.Signal != int(syscall.SIGINT) || res.ExitCode != 130 || res.Canceled {
		t.Fatalf("after SIGINT: %v %+v", err, res)
	}

	ctx, cancel := context.WithCancel(t.Context())
	p, err = g.conn.Start(ctx, ExecRequest{Argv: []string{"sh", "-c", `"$0" 1000 & "$0" 1000`, sleep}, Dir: "/"}, nil, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, 5*time.Second, "two sleeps", func() bool { return len(census(marker)) >= 3 })
	cancel()
	res, err = p.Wait(ctx)
	if !errors.Is(err, context.Canceled) || !res.Canceled || res.Signal != int(syscall.SIGKILL) {
		t.Fatalf("after cancel: %v %+v", err, res)
	}
	if left := census(marker); len(left) != 0 {
		t.Fatalf("processes left after cancel: %+v", left)
	}
}

func TestConnectionLoss(t *testing.T) {
	t.Parallel()
	t.Run("guest killed", func(t *testing.T) {
		t.Parallel()
		g := startHostGuest(t)
		marker := newMarker()
		sleep := markedSleep(t, marker)
		p, err := g.conn.Start(t.Context(), ExecRequest{Argv: []string{sleep, "1000"}, Dir: "/"}, nil, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		g.cmd.Process.Kill()
		start := time.Now()
		res, err := p.Wait(t.Context())
		if err != nil || !res.Lost || res.ExitCode != -1 {
			t.Fatalf("got %v %+v, want Lost", err, res)
		}
		if d := time.Since(start); d > 2*time.Second {
			t.Errorf("Lost took %s", d)
		}
		// The orphaned reaper notices its guest is gone and kills the tree.
		waitFor(t, 10*time.Second, "the orphaned command to die", func() bool { return len(census(marker)) == 0 })
		if _, err := g.conn.Exec(t.Context(), ExecRequest{Argv: []string{"true"}}, nil, nil, nil); !errors.Is(err, ErrClosed) {
			t.Errorf("exec on a dead connection: got %v, want ErrClosed", err)
		}
	})
	t.Run("daemon drops the connection and restarts", func(t *testing.T) {
		t.Parallel()
		g := startHostGuest(t)
		marker := newMarker()
		sleep := markedSleep(t, marker)
		p, err := g.conn.Start(t.Context(), ExecRequest{Argv: []string{sleep, "1000"}, Dir: "/"}, nil, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		// The daemon goes away: its socket too.
		g.ln.Close()
		g.conn.Close()
		res, err := p.Wait(t.Context())
		if err != nil || !res.Lost {
			t.Fatalf("got %v %+v, want Lost", err, res)
		}
		// The guest kills the commands of the connection it lost.
		waitFor(t, 10*time.Second, "the command of the lost connection to die", func() bool { return len(census(marker)) == 0 })
		// It keeps dialing; a new daemon on the same path gets it back.
		time.Sleep(1200 * time.Millisecond) // let the guest's backoff reach its cap
		ln, err := Listen(g.sock, g.token, ListenOptions{})
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		defer cancel()
		c, err := ln.Accept(ctx)
		if err != nil {
			t.Fatalf("guest did not come back: %v", err)
		}
		defer c.Close()
		if c.Info().Pid != g.cmd.Process.Pid {
			t.Errorf("guest pid %d, want %d", c.Info().Pid, g.cmd.Process.Pid)
		}
		res, out, _, err := run(t, c, ExecRequest{Argv: []string{"echo", "back"}, Env: hostEnv, Dir: "/"}, "")
		if err != nil || out != "back\n" {
			t.Fatalf("exec after reconnect: %v %+v %q", err, res, out)
		}
		if _, err := c.Ping(t.Context()); err != nil {
			t.Fatal(err)
		}
	})
}

func TestWrongTokenRefused(t *testing.T) {
	t.Parallel()
	good, _ := NewToken()
	bad, _ := NewToken()
	g := startGuestProcess(t, shortDir(t)+"/agentbox.sock", good, bad)
	ctx, cancel := context.WithTimeout(t.Context(), 1500*time.Millisecond)
	defer cancel()
	if c, err := g.ln.Accept(ctx); err == nil {
		c.Close()
		t.Fatal("a guest with the wrong token was accepted")
	}
	select {
	case <-g.waited:
		t.Fatalf("the guest gave up: %v", g.waitErr)
	default:
	}
}

func TestReaperKilledFromInside(t *testing.T) {
	t.Parallel()
	g := startHostGuest(t)
	marker := newMarker()
	sleep := markedSleep(t, marker)
	// The command kills its reaper and lives on as an orphan.
	res, _, _, err := run(t, g.conn, ExecRequest{
		Argv: []string{"sh", "-c", `kill -9 $PPID; "$0" 1000 & exec "$0" 1000`, sleep},
		Dir:  "/",
	}, "")
	if err != nil {
		t.Fatal(err)
	}
	if res.ExitCode != -1 || res.Signal != 0 {
		t.Errorf("result %+v, want an unknown status", res)
	}
	if left := census(marker); len(left) != 0 {
		t.Fatalf("orphans of a killed reaper left: %+v", left)
	}
	// The guest still works.
	if res, out, _, err := run(t, g.conn, ExecRequest{Argv: []string{"echo", "ok"}, Env: hostEnv, Dir: "/"}, ""); err != nil || out != "ok\n" {
		t.Fatalf("exec after: %v %+v %q", err, res, out)
	}
}

func TestReaperStoppedFromInside(t *testing.T) {
	t.Parallel()
	g := startHostGuest(t)
	marker := newMarker()
	sleep := markedSleep(t, marker)
	res, _, _, err := run(t, g.conn, ExecRequest{
		Argv:    []string{"sh", "-c", `kill -STOP $PPID; exec "$0" 1000`, sleep},
		Dir:     "/",
		Timeout: time.Second,
	}, "")
	if err != nil {
		t.Fatal(err)
	}
	if !res.TimedOut || res.Signal != int(syscall.SIGKILL) {
		t.Errorf("result %+v, want timed out and killed", res)
	}
	if left := census(marker); len(left) != 0 {
		t.Fatalf("processes left: %+v", left)
	}
}

func TestCommandsCannotSignalTheGuest(t *testing.T) {
	t.Parallel()
	g := startHostGuest(t)
	pid := g.cmd.Process.Pid
	// Whatever happens, leave the guest running for the cleanup.
	defer syscall.Kill(pid, syscall.SIGCONT)
	res, out, errOut, err := run(t, g.conn, ExecRequest{
		Argv: []string{"sh", "-c", `for s in STOP TERM KILL; do kill -$s $0 || echo refused; done`, fmt.Sprint(pid)},
		Env:  hostEnv,
		Dir:  "/",
	}, "")
	if err != nil || out != "refused\nrefused\nrefused\n" {
		t.Fatalf("got %v %+v %q %q; want every signal refused", err, res, out, errOut)
	}
	if _, err := g.conn.Ping(t.Context()); err != nil {
		t.Fatalf("the guest is gone: %v", err)
	}
	// Signals to the command's own processes still work.
	res, _, _, err = run(t, g.conn, ExecRequest{Argv: []string{"sh", "-c", "sleep 1000 & kill -KILL $!; wait $!"}, Env: hostEnv, Dir: "/"}, "")
	if err != nil || res.ExitCode != 137 {
		t.Fatalf("kill of the command's own child: %v %+v", err, res)
	}
}

func TestSIGTERMKillsEverything(t *testing.T) {
	t.Parallel()
	g := startHostGuest(t)
	marker := newMarker()
	sleep := markedSleep(t, marker)
	p, err := g.conn.Start(t.Context(), ExecRequest{Argv: []string{"sh", "-c", hostileScript, marker + "-main", sleep}, Env: hostEnv, Dir: "/"}, nil, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, 5*time.Second, "the hostile tree", func() bool { return containsProc(census(marker), "-nohup") })
	g.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-g.waited:
	case <-time.After(10 * time.Second):
		t.Fatal("the guest did not exit on SIGTERM")
	}
	if g.waitErr != nil {
		t.Errorf("guest exit: %v", g.waitErr)
	}
	if left := census(marker); len(left) != 0 {
		t.Fatalf("processes left after the guest's SIGTERM: %+v", left)
	}
	if res, err := p.Wait(t.Context()); err != nil || !res.Lost {
		t.Errorf("got %v %+v, want Lost", err, res)
	}
}

func TestPTY(t *testing.T) {
	t.Parallel()
	g := startHostGuest(t)
	res, out, _, err := run(t, g.conn, ExecRequest{Argv: []string{"stty", "size"}, Env: hostEnv, Dir: "/", TTY: true, Rows: 30, Cols: 77}, "")
	if err != nil || res.ExitCode != 0 || strings.TrimSpace(out) != "30 77" {
		t.Fatalf("stty size on a TTY: %v %+v %q", err, res, out)
	}

	s, err := g.conn.PTY(t.Context(), ExecRequest{Argv: []string{"sh"}, Env: append([]string{"PS1=$ "}, hostEnv...), Dir: "/", Rows: 40, Cols: 100})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	term := &termReader{r: s}
	go term.pump()
	s.Write([]byte("stty size\n"))
	term.waitFor(t, "40 100")
	if err := s.Resize(50, 132); err != nil {
		t.Fatal(err)
	}
	s.Write([]byte("stty size\n"))
	term.waitFor(t, "50 132")
	s.Write([]byte("tty\n"))
	term.waitFor(t, "/dev/pts/")
	s.Write([]byte("exit 3\n"))
	res, err = s.Wait(t.Context())
	if err != nil || res.ExitCode != 3 {
		t.Fatalf("shell result: %v %+v", err, res)
	}
	term.waitEOF(t)
}

// termReader accumulates a terminal's output.
type termReader struct {
	r    io.Reader
	mu   sync.Mutex
	buf  bytes.Buffer
	done bool
}

func (tr *termReader) pump() {
	b := make([]byte, 4096)
	for {
		n, err := tr.r.Read(b)
		tr.mu.Lock()
		tr.buf.Write(b[:n])
		if err != nil {
			tr.done = true
		}
		tr.mu.Unlock()
		if err != nil {
			return
		}
	}
}

func (tr *termReader) waitFor(t *testing.T, s string) {
	t.Helper()
	waitFor(t, 10*time.Second, fmt.Sprintf("%q on the terminal", s), func() bool {
		tr.mu.Lock()
		defer tr.mu.Unlock()
		// The terminal echoes the command lines; none of them holds s.
		i := strings.Index(tr.buf.String(), s)
		if i < 0 {
			return false
		}
		tr.buf.Next(i + len(s))
		return true
	})
}

func (tr *termReader) waitEOF(t *testing.T) {
	t.Helper()
	waitFor(t, 10*time.Second, "EOF on the terminal", func() bool {
		tr.mu.Lock()
		defer tr.mu.Unlock()
		return tr.done
	})
}

func TestPing(t *testing.T) {
	t.Parallel()
	g := startHostGuest(t)
	var wg sync.WaitGroup
	for range 5 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
			defer cancel()
			if rtt, err := g.conn.Ping(ctx); err != nil || rtt <= 0 {
				t.Errorf("ping: %v %s", err, rtt)
			}
		}()
	}
	wg.Wait()
	if g.conn.Info().Pid != g.cmd.Process.Pid {
		t.Errorf("guest says pid %d, it is %d", g.conn.Info().Pid, g.cmd.Process.Pid)
	}
}

// TestTokenFromDescriptor starts a guest the way a backend that can pass
// descriptors may: the token in an inherited pipe, not in the environment.
func TestTokenFromDescriptor(t *testing.T) {
	t.Parallel()
	token, err := NewToken()
	if err != nil {
		t.Fatal(err)
	}
	sock := shortDir(t) + "/agentbox.sock"
	ln, err := Listen(sock, token, ListenOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	w.WriteString(token)
	w.Close()
	cmd := exec.Command(guestBin, "-socket", sock)
	cmd.Env = []string{TokenFDEnv + "=3"}
	cmd.ExtraFiles = []*os.File{r}
	var log syncBuffer
	cmd.Stderr = &log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	r.Close()
	defer func() {
		cmd.Process.Signal(syscall.SIGTERM)
		cmd.Wait()
		if t.Failed() {
			t.Logf("guest log:\n%s", log.String())
		}
	}()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	c, err := ln.Accept(ctx)
	if err != nil {
		t.Fatalf("the guest did not connect: %v", err)
	}
	defer c.Close()
	res, out, _, err := run(t, c, ExecRequest{Argv: []string{"sh", "-c", fmt.Sprintf("cat /proc/%d/environ; ls /proc/%d/fd", cmd.Process.Pid, cmd.Process.Pid)}, Env: hostEnv, Dir: "/"}, "")
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("exec: %v %+v", err, res)
	}
	if strings.Contains(out, token) {
		t.Errorf("a command can read the token: %q", out)
	}
}
