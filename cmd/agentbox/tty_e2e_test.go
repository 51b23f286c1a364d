package main

import (
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentbox/agentbox/client"
)

// Commands on a terminal through the CLI, the Go client and a real daemon
// on every backend: a background process started with --tty is on a
// terminal of the size asked for (stdin, stdout and stderr), its output
// comes through the logs as stdout, typed input reaches it, resize changes
// its size and delivers SIGWINCH, closing its input reads as end of file,
// and kill ends its tree. A command without --tty is unchanged.
func TestTTYProcessesThroughTheCLI(t *testing.T) {
	everyBackend(t, testTTYProcesses)
}

func testTTYProcesses(t *testing.T, backend string) {
	data := t.TempDir()
	d := startDaemon(t, data)
	cleanupAll(t, data)
	t.Cleanup(func() { d.stop(t) })
	ctx := t.Context()
	cl := d.client(t)
	cli := func(stdin string, args ...string) (string, string, int) {
		t.Helper()
		return runCLI(t, data, stdin, args...)
	}
	ok := func(args ...string) map[string]any {
		t.Helper()
		out, errOut, code := cli("", append([]string{"--json"}, args...)...)
		if code != 0 {
			t.Fatalf("agentbox %v: exit %d: %s %s", args, code, out, errOut)
		}
		return oneJSON(t, out)
	}
	if backend == "local" {
		ok("image", "build", "--kind", "busybox")
	}
	ws := ok("ws", "create", "--empty")["id"].(string)
	ok("sandbox", "create", "--ws", ws, "--backend", backend, "--image", "agentbox/busybox:latest")

	const script = `for fd in 0 1 2; do if test -t $fd; then echo "isatty$fd yes"; else echo "isatty$fd no"; fi; done
echo "size $(stty size)"
echo "term $TERM"
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
	out, errOut, code := cli("", "exec", "--detach", "--tty", "--cols", "100", "--rows", "30", ws, "--sh", script)
	id := strings.TrimSpace(out)
	if code != 0 || !strings.HasPrefix(id, "ex_") {
		t.Fatalf("exec --detach --tty: exit %d %q %q", code, out, errOut)
	}
	// The terminal's output, followed as it comes.
	var mu sync.Mutex
	var shown strings.Builder
	followed := make(chan client.Process, 1)
	go func() {
		end, err := cl.FollowProcessLogs(ctx, ws, id, client.LogOptions{}, func(l client.ProcessLogs) error {
			mu.Lock()
			shown.Write(l.Bytes())
			mu.Unlock()
			return nil
		})
		if err != nil {
			t.Errorf("following the terminal's output: %v", err)
		}
		followed <- end
	}()
	screen := func() string {
		mu.Lock()
		defer mu.Unlock()
		return shown.String()
	}
	waitFor := func(want string) {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for !strings.Contains(screen(), want) {
			if time.Now().After(deadline) {
				t.Fatalf("the terminal never showed %q; it shows %q", want, screen())
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	waitFor("ready")
	for _, want := range []string{"isatty0 yes", "isatty1 yes", "isatty2 yes", "size 30 100", "term xterm-256color"} {
		if !strings.Contains(screen(), want) {
			t.Errorf("the terminal shows %q, want %q", screen(), want)
		}
	}
	p := ok("ps", ws)["processes"].([]any)[0].(map[string]any)
	if p["id"] != id || p["tty"] != true || p["cols"] != float64(100) || p["rows"] != float64(30) {
		t.Errorf("ps shows %v, want the process on a 100x30 terminal", p)
	}

	if out, errOut, code := cli("hello there\n", "stdin", ws, id); code != 0 {
		t.Fatalf("stdin: exit %d %q %q", code, out, errOut)
	}
	waitFor("got:hello there")
	waitFor("armed")
	r := ok("resize", ws, id, "--cols", "120", "--rows", "40")
	if r["cols"] != float64(120) || r["rows"] != float64(40) || r["state"] != "running" {
		t.Errorf("resize: %v", r)
	}
	waitFor("winch 40 120")
	if out, errOut, code := cli("", "stdin", "--close", ws, id); code != 0 {
		t.Fatalf("stdin --close: exit %d %q %q", code, out, errOut)
	}
	waitFor("eof 0")
	waitFor("children")
	ok("kill", ws, id, "--signal", "KILL")
	var end client.Process
	select {
	case end = <-followed:
	case <-time.After(30 * time.Second):
		t.Fatal("the killed process's logs did not end")
	}
	if end.State != "killed" || end.StderrBytes != 0 || end.StdoutBytes == 0 {
		t.Errorf("the killed process: %+v, want killed, all its output on stdout", end)
	}
	if left := ok("exec", ws, "--sh", `cat /proc/[0-9]*/cmdline 2>/dev/null | tr '\0' ' '`)["stdout"].(string); strings.Contains(left, "sleep 1234") {
		t.Errorf("the killed process's children still run: %q", left)
	}
	// An ended process is no error to resize: the reply shows how it ended.
	if r := ok("resize", ws, id, "--cols", "80", "--rows", "24"); r["state"] != "killed" {
		t.Errorf("resize of an ended process: %v", r)
	}

	// A buffered exec on a terminal: stdout only, the size asked for.
	doc := ok("exec", "--tty", "--cols", "50", "--rows", "10", ws, "--sh", "stty size; test -t 0 && test -t 2 && echo tty; echo to-stderr >&2")
	if doc["stdout"] != "10 50\r\ntty\r\nto-stderr\r\n" || doc["stderr"] != "" || doc["exit_code"] != float64(0) {
		t.Errorf("exec --tty --json: %v", doc)
	}
	// Without --tty nothing changes: pipes, stderr apart, no resizing.
	doc = ok("exec", ws, "--sh", "test -t 0 || test -t 1 || echo no-tty; echo err >&2; echo ${TERM:-unset}")
	if doc["stdout"] != "no-tty\nunset\n" || doc["stderr"] != "err\n" {
		t.Errorf("exec without --tty: %v", doc)
	}
	plain, err := cl.StartProcess(ctx, ws, client.Exec{Sh: "read line; echo got:$line"})
	if err != nil {
		t.Fatal(err)
	}
	if plain.TTY || plain.Cols != 0 {
		t.Errorf("a process without a terminal shows %+v", plain)
	}
	if _, err := cl.ResizeProcess(ctx, ws, plain.ID, 80, 24); !errors.Is(err, client.ErrInvalid) {
		t.Errorf("resizing a process without a terminal: %v, want ErrInvalid", err)
	}
	cl.WriteStdin(ctx, ws, plain.ID, []byte("x\n"), true)
	if w, err := cl.WaitProcess(ctx, ws, plain.ID, 30*time.Second); err != nil || w.State != "exited" || w.ExitCode != 0 {
		t.Errorf("the process without a terminal: %+v %v", w, err)
	}

	// Bad sizes change nothing.
	for _, args := range [][]string{
		{"exec", "--detach", "--tty", "--cols", "1001", ws, "--", "true"},
		{"exec", "--detach", "--tty", "--rows", "-1", ws, "--", "true"},
		{"exec", "--cols", "100", ws, "--", "true"},
		{"resize", ws, id, "--cols", "0", "--rows", "24"},
		{"resize", ws, id, "--cols", "80"},
	} {
		if out, errOut, code := cli("", args...); code == 0 || !strings.HasPrefix(errOut, "agentbox: ") {
			t.Errorf("agentbox %v: exit %d %q %q, want a failure", args, code, out, errOut)
		}
	}
	if n := len(ok("ps", ws)["processes"].([]any)); n != 2 {
		t.Errorf("%d processes after the refused requests, want the 2 started", n)
	}
}
