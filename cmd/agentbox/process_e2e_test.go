package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/agentbox/agentbox/client"
)

// Background processes and ports through the CLI, the Go client and a
// real daemon on every backend (issue 12, items 3 and 4): a web server in
// the sandbox reached from the host through the port relay and through
// the API; a process outliving its call; logs from an offset, followed and
// bounded by the ring; stdin; signals and wait; a stopped sandbox ending
// its processes; a hostile process flooding output and one refusing its
// input.
func TestProcessesAndPortsThroughTheCLI(t *testing.T) {
	everyBackend(t, testProcesses)
}

func testProcesses(t *testing.T, backend string) {
	data := t.TempDir()
	d := startDaemon(t, data)
	cleanupAll(t, data)
	t.Cleanup(func() { d.stop(t) })
	ctx := t.Context()
	cl := d.client(t)
	ok := func(args ...string) map[string]any {
		t.Helper()
		out, errOut, code := runCLI(t, data, "", append([]string{"--json"}, args...)...)
		if code != 0 {
			t.Fatalf("agentbox %v: exit %d: %s %s", args, code, out, errOut)
		}
		return oneJSON(t, out)
	}
	if backend == "local" {
		ok("image", "build", "--kind", "busybox")
	}
	ws := ok("ws", "create", "--empty")["id"].(string)
	sb := ok("sandbox", "create", "--ws", ws, "--backend", backend, "--image", "agentbox/busybox:latest")["id"].(string)
	if _, err := cl.WriteFile(ctx, ws, "www/index.html", strings.NewReader("hello from the sandbox\n"), 0o644, true); err != nil {
		t.Fatal(err)
	}
	bigFile := strings.Repeat("0123456789abcdef", 1<<19) // 8 MiB: many windows of the guest's flow control
	if _, err := cl.WriteFile(ctx, ws, "www/big.txt", strings.NewReader(bigFile), 0o644, true); err != nil {
		t.Fatal(err)
	}

	// A web server started detached: the call returns with its ID, and
	// the server runs on.
	const port = 18763
	out, errOut, code := runCLI(t, data, "", "exec", "--detach", ws, "--", "busybox", "httpd", "-f", "-p", fmt.Sprintf("127.0.0.1:%d", port), "-h", "/workspace/www")
	srv := strings.TrimSpace(out)
	if code != 0 || !strings.HasPrefix(srv, "ex_") {
		t.Fatalf("exec --detach: exit %d %q %q", code, out, errOut)
	}
	ps := ok("ps", ws)["processes"].([]any)
	if len(ps) != 1 || ps[0].(map[string]any)["id"] != srv || ps[0].(map[string]any)["state"] != "running" {
		t.Fatalf("ps after exec --detach returned: %v", ps)
	}

	// Unpublished, the port is reachable from nowhere on the host.
	if c, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", port), time.Second); err == nil {
		c.Close()
		t.Errorf("the sandbox's port %d answers on the host's loopback without being published", port)
	}
	// Published: a loopback URL that reaches the server.
	out, errOut, code = runCLI(t, data, "", "port", ws, strconv.Itoa(port))
	url := strings.TrimSpace(out)
	if code != 0 || !strings.HasPrefix(url, "http://127.0.0.1:") {
		t.Fatalf("port: exit %d %q %q", code, out, errOut)
	}
	if again := ok("port", ws, strconv.Itoa(port))["url"]; again != url {
		t.Errorf("port published again: %v, want the same %s", again, url)
	}
	body := waitForHTTP(t, http.DefaultClient, url+"index.html")
	if body != "hello from the sandbox\n" {
		t.Errorf("GET through the port: %q", body)
	}
	if got := waitForHTTP(t, http.DefaultClient, url+"big.txt"); got != bigFile {
		t.Errorf("GET of 8 MiB through the port: %d bytes, not the file's %d", len(got), len(bigFile))
	}
	// The same through the API's forwarding, over the daemon's socket.
	sock := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var dl net.Dialer
		return dl.DialContext(ctx, "unix", filepath.Join(data, "agentbox.sock"))
	}}}
	if got := waitForHTTP(t, sock, fmt.Sprintf("http://agentbox/v1/sandboxes/%s/ports/%d/index.html", sb, port)); got != body {
		t.Errorf("GET through the API's forwarding: %q", got)
	}
	// Nothing listens on another port: the relay closes the connection,
	// and the API says so.
	other := ok("port", ws, "18764")["url"].(string)
	if resp, err := http.Get(other); err == nil {
		resp.Body.Close()
		t.Errorf("GET of a port nobody listens on: %s", resp.Status)
	}
	resp, err := sock.Get(fmt.Sprintf("http://agentbox/v1/sandboxes/%s/ports/18764/", sb))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable {
		t.Errorf("API forwarding to a port nobody listens on: %s", resp.Status)
	}

	// A process that reads its input: stdin written, closed, its output
	// followed and read from offsets, its exit waited for.
	echo, err := cl.StartProcess(ctx, ws, client.Exec{Sh: `echo ready; while read l; do echo "got $l"; done; echo bye; echo done >&2; exit 7`})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cl.WriteStdin(ctx, ws, echo.ID, []byte("a\nb\n"), false); err != nil {
		t.Fatal(err)
	}
	if _, err := cl.WriteStdin(ctx, ws, echo.ID, []byte("c\n"), true); err != nil {
		t.Fatal(err)
	}
	var followed strings.Builder
	end, err := cl.FollowProcessLogs(ctx, ws, echo.ID, client.LogOptions{}, func(l client.ProcessLogs) error {
		followed.Write(l.Bytes())
		return nil
	})
	const want = "ready\ngot a\ngot b\ngot c\nbye\n"
	if err != nil || followed.String() != want || end.State != "exited" || end.ExitCode != 7 {
		t.Errorf("followed %q, ended %+v %v; want %q, exited 7", followed.String(), end, err, want)
	}
	w, err := cl.WaitProcess(ctx, ws, echo.ID, 10*time.Second)
	if err != nil || w.State != "exited" || w.ExitCode != 7 || w.StdoutBytes != int64(len(want)) || !w.StdinClosed {
		t.Errorf("wait: %+v %v", w, err)
	}
	l, err := cl.ProcessLogs(ctx, ws, echo.ID, client.LogOptions{Offset: 6})
	if err != nil || l.Data != want[6:] || l.Offset != 6 || l.NextOffset != int64(len(want)) || l.Dropped != 0 {
		t.Errorf("logs from offset 6: %+v %v", l, err)
	}
	l, err = cl.ProcessLogs(ctx, ws, echo.ID, client.LogOptions{Stream: "stderr"})
	if err != nil || l.Data != "done\n" {
		t.Errorf("stderr: %+v %v", l, err)
	}
	if _, err := cl.WriteStdin(ctx, ws, echo.ID, []byte("late\n"), false); !errors.Is(err, client.ErrConflict) {
		t.Errorf("stdin to an ended process: %v, want a conflict", err)
	}
	out, errOut, code = runCLI(t, data, "", "logs", ws, echo.ID)
	if code != 0 || out != want || errOut != "done\n" {
		t.Errorf("agentbox logs: exit %d %q %q", code, out, errOut)
	}
	out, _, code = runCLI(t, data, "", "logs", ws, echo.ID, "--tail", "4", "--stream", "stdout")
	if code != 0 || out != "bye\n" {
		t.Errorf("agentbox logs --tail 4: exit %d %q", code, out)
	}
	if _, _, code := runCLI(t, data, "", "wait", ws, echo.ID); code != 7 {
		t.Errorf("agentbox wait: exit %d, want the process's 7", code)
	}

	// The ring keeps the last ProcessRingBytes of each stream: a reader
	// from 0 gets the oldest byte kept and the count of those dropped.
	const total = 3 << 20
	big, err := cl.StartProcess(ctx, ws, client.Exec{Sh: fmt.Sprintf("yes 0123456789abcdef | head -c %d", total)})
	if err != nil {
		t.Fatal(err)
	}
	if w, err := cl.WaitProcess(ctx, ws, big.ID, time.Minute); err != nil || w.State != "exited" || w.StdoutBytes != total {
		t.Fatalf("wait for 3 MiB of output: %+v %v", w, err)
	}
	l, err = cl.ProcessLogs(ctx, ws, big.ID, client.LogOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ring := int64(l.Process.RingBytes)
	if ring != 1<<20 || l.Offset != total-ring || l.Dropped != total-ring || int64(len(l.Data)) != ring || l.NextOffset != total {
		t.Errorf("logs from 0 of 3 MiB: offset %d dropped %d len %d next %d ring %d", l.Offset, l.Dropped, len(l.Data), l.NextOffset, ring)
	}
	const pat = "0123456789abcdef\n"
	for _, i := range []int{0, 1, 16, 17, len(l.Data) - 17, len(l.Data) - 1} {
		if i >= 0 && i < len(l.Data) && l.Data[i] != pat[(l.Offset+int64(i))%int64(len(pat))] {
			t.Errorf("byte %d of the ring (stream offset %d) is %q, not the stream's", i, l.Offset+int64(i), l.Data[i])
		}
	}

	// A hostile process floods its output with nobody reading: the daemon
	// drains it (the command is never held up) within bounded memory, and
	// recycles the buffers it reads the output into: what it allocates
	// does not follow the bytes, so its heap does not either, however far
	// a loaded machine's collector lags.
	rssBefore := rss(t, d.cmd.Process.Pid)
	allocBefore := allocatedTotal(t, data)
	flood, err := cl.StartProcess(ctx, ws, client.Exec{Argv: []string{"yes", strings.Repeat("x", 1000)}})
	if err != nil {
		t.Fatal(err)
	}
	var written int64
	deadline := time.Now().Add(2 * time.Minute)
	for written < 256<<20 && time.Now().Before(deadline) {
		p, err := cl.GetProcess(ctx, ws, flood.ID)
		if err != nil {
			t.Fatal(err)
		}
		written = p.StdoutBytes
		time.Sleep(200 * time.Millisecond) // polling the process's progress, bounded by the deadline
	}
	if written < 256<<20 {
		t.Errorf("the flood wrote only %d bytes in 2 minutes: is the daemon draining it?", written)
	}
	allocated := allocatedTotal(t, data) - allocBefore
	grew := rss(t, d.cmd.Process.Pid) - rssBefore
	t.Logf("%d MiB of output with nobody reading: the daemon allocated %d MiB, its resident set grew by %d KiB", written>>20, allocated>>20, grew>>10)
	if allocated > written/4 {
		t.Errorf("the daemon allocated %d MiB while %d MiB of output flowed: memory per byte of output", allocated>>20, written>>20)
	}
	if grew > 96<<20 {
		t.Errorf("the daemon's resident set grew by %d MiB while %d MiB flowed through a 1 MiB ring", grew>>20, written>>20)
	}
	// A process that never reads its input: a write gives up with a
	// conflict saying how much was queued, and nothing else waits on it.
	deaf, err := cl.StartProcess(ctx, ws, client.Exec{Argv: []string{"sleep", "1000"}})
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	res, err := cl.WriteStdin(ctx, ws, deaf.ID, make([]byte, 1<<20), false)
	if !errors.Is(err, client.ErrConflict) || res.Written >= 1<<20 || time.Since(start) > 30*time.Second {
		t.Errorf("1 MiB to a process that never reads: %+v %v after %s, want a conflict within 30s", res, err, time.Since(start))
	}
	if _, err := cl.ListProcesses(ctx, ws); err != nil {
		t.Errorf("ps while a process refuses its input: %v", err)
	}
	if p, err := cl.SignalProcess(ctx, ws, flood.ID, "KILL"); err != nil || p.ID != flood.ID {
		t.Errorf("kill the flood: %+v %v", p, err)
	}
	if w, err := cl.WaitProcess(ctx, ws, flood.ID, 30*time.Second); err != nil || w.State != "killed" || w.Signal != 9 {
		t.Errorf("the flood after KILL: %+v %v", w, err)
	}

	// kill sends TERM to the server's tree: killed, with the signal.
	killed := ok("kill", ws, srv)
	if killed["id"] != srv {
		t.Errorf("kill: %v", killed)
	}
	if w, err := cl.WaitProcess(ctx, ws, srv, 30*time.Second); err != nil || w.State != "killed" || w.Signal != 15 || !strings.Contains(w.Reason, "signal 15") {
		t.Errorf("the server after kill: %+v %v", w, err)
	}

	// A process still running when its sandbox stops ends lost, saying so,
	// and the sandbox's published ports close.
	url = ok("port", ws, strconv.Itoa(port))["url"].(string)
	ok("sandbox", "stop", sb)
	w, err = cl.WaitProcess(ctx, ws, deaf.ID, 30*time.Second)
	if err != nil || w.State != "lost" || !strings.Contains(w.Reason, "stopped") || w.FinishedAt == nil {
		t.Errorf("a process of a stopped sandbox: %+v %v", w, err)
	}
	if resp, err := http.Get(url); err == nil {
		resp.Body.Close()
		t.Errorf("the port of a stopped sandbox still answers: %s", resp.Status)
	}
	if _, err := cl.PublishPort(ctx, ws, port); !errors.Is(err, client.ErrConflict) {
		t.Errorf("publishing a port with no sandbox running: %v, want a conflict", err)
	}
	// Every process is an exec with its event.
	evs, err := cl.Events(ctx, client.EventFilter{Workspace: ws, Type: "exec.finished"})
	if err != nil || len(evs) < 5 {
		t.Errorf("exec.finished events: %d %v", len(evs), err)
	}
	// Unknown processes are not_found, naming them.
	_, errOut, code = runCLI(t, data, "", "logs", ws, "ex_nope")
	if code == 0 || !strings.Contains(errOut, "ex_nope") || !strings.Contains(errOut, "not found") {
		t.Errorf("logs of an unknown process: exit %d %q", code, errOut)
	}

	// The rings live in the daemon: one that stops takes its sandboxes
	// and their processes with it, and the next one holds none of them,
	// but says what their exec records say.
	if backend != "docker" {
		return
	}
	late, err := cl.StartProcess(ctx, ws, client.Exec{Argv: []string{"sleep", "1000"}})
	if err != nil {
		t.Fatal(err)
	}
	d.stop(t)
	d = startDaemon(t, data)
	cl = d.client(t)
	if ps, err := cl.ListProcesses(ctx, ws); err != nil || len(ps) != 0 {
		t.Errorf("ps after a restart: %v %v", ps, err)
	}
	_, err = cl.ProcessLogs(ctx, ws, late.ID, client.LogOptions{})
	if !errors.Is(err, client.ErrNotFound) || !strings.Contains(err.Error(), "exec record says lost") {
		t.Errorf("logs of a process of the last daemon: %v", err)
	}
}

// waitForHTTP GETs url until it answers 200 (the server may still be
// starting), within 30 seconds, and returns the body.
func waitForHTTP(t *testing.T, c *http.Client, url string) string {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := c.Get(url)
		if err == nil {
			b, rerr := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode == 200 && rerr == nil {
				return string(b)
			}
			err = fmt.Errorf("%s %s %v", resp.Status, b, rerr)
		}
		if time.Now().After(deadline) {
			t.Fatalf("GET %s: %v", url, err)
		}
		time.Sleep(100 * time.Millisecond) // the server starting, bounded by the deadline
	}
}

// allocatedTotal is what the daemon serving data has allocated on its
// heap so far, from its /metrics.
func allocatedTotal(t *testing.T, data string) int64 {
	t.Helper()
	const name = "go_memstats_alloc_bytes_total "
	m := scrape(t, data)
	for _, line := range strings.Split(m, "\n") {
		if v, ok := strings.CutPrefix(line, name); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				t.Fatalf("%s%s: %v", name, v, err)
			}
			return int64(f)
		}
	}
	t.Fatalf("the daemon's /metrics lack %s", name)
	return 0
}

// rss is a process's resident set in bytes.
func rss(t *testing.T, pid int) int64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return kb << 10
		}
	}
	t.Fatalf("no VmRSS for %d", pid)
	return 0
}
