package api_test

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentbox/agentbox/client"
	"github.com/agentbox/agentbox/internal/api"
	"github.com/agentbox/agentbox/internal/backend/docker"
	"github.com/agentbox/agentbox/internal/manager"
	"github.com/agentbox/agentbox/internal/sandbox"
	"github.com/agentbox/agentbox/internal/store"
	"github.com/agentbox/agentbox/internal/store/sqlstore"
	"github.com/agentbox/agentbox/internal/testutil"
	"github.com/agentbox/agentbox/internal/testutil/skip"
	"github.com/agentbox/agentbox/internal/workspace"
)

const testImage = "agentbox/busybox:latest"

var (
	guestOnce sync.Once
	guestPath string
	guestErr  error
)

// guestBinary builds cmd/agentbox-guest once for the package's tests.
func guestBinary(t *testing.T) string {
	guestOnce.Do(func() {
		dir, err := os.MkdirTemp("", "agentbox-guest-")
		if err != nil {
			guestErr = err
			return
		}
		guestPath = filepath.Join(dir, "agentbox-guest")
		cmd := exec.Command("go", "build", "-o", guestPath, "../../cmd/agentbox-guest")
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			guestErr = errors.New(string(out))
		}
	})
	if guestErr != nil {
		t.Fatalf("building agentbox-guest: %v", guestErr)
	}
	return guestPath
}

// sandboxFixture is an API server whose manager runs sandboxes on the
// real docker backend, with one workspace ready.
type sandboxFixture struct {
	srv *httptest.Server
	cl  *client.Client
	st  store.Store
	ws  client.Workspace
	// serverLog is the HTTP server's error log (a handler's panic is
	// logged there).
	serverLog *syncBuffer
}

// newSandboxFixture serves the API over the docker backend; wrap, if
// given, wraps the API's handler (the OpenAPI checks see every exchange).
func newSandboxFixture(t *testing.T, wrap ...func(http.Handler) http.Handler) *sandboxFixture {
	t.Helper()
	if os.Geteuid() != 0 {
		skip.OrFail(t, "sandbox tests chown workspaces to the sandbox user: run as root")
	}
	data := t.TempDir()
	if err := workspace.ProbeOverlay(data); err != nil {
		skip.OrFail(t, "overlay mounts do not work here: "+err.Error())
	}
	be, err := docker.New(docker.Options{Name: docker.NameDocker, Runtime: docker.RuntimeRunc})
	if err == nil {
		_, err = be.List(t.Context(), map[string]string{sandbox.LabelManaged: "1"})
	}
	if err != nil {
		skip.OrFail(t, "docker backend unavailable: "+err.Error())
	}
	t.Cleanup(func() { be.Close() })
	st, err := sqlstore.Open(t.Context(), filepath.Join(data, "agentbox.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	m, err := manager.New(t.Context(), st, manager.Config{DataDir: data, UID: 1000, GID: 1000,
		Backends: map[string]sandbox.Backend{"docker": be}, DefaultBackend: "docker", DefaultImage: testImage, GuestBinary: guestBinary(t)})
	if err != nil {
		t.Fatal(err)
	}
	serverLog := &syncBuffer{}
	var h http.Handler = api.New(m, api.Options{})
	for _, w := range wrap {
		h = w(h)
	}
	srv := httptest.NewUnstartedServer(h)
	srv.Config.ErrorLog = log.New(serverLog, "", 0)
	srv.Start()
	t.Cleanup(srv.Close)
	cl, err := client.New(srv.URL, "")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx := context.Background() // t.Context is already cancelled here
		sbs, _ := st.ListSandboxes(ctx, store.SandboxFilter{})
		wss, _ := m.ListWorkspaces(ctx, manager.ListFilter{})
		for _, w := range wss {
			if err := m.RemoveWorkspace(ctx, w.ID); err != nil {
				t.Errorf("cleanup: %v", err)
			}
		}
		for _, sb := range sbs {
			left, _ := be.List(ctx, map[string]string{sandbox.LabelSandbox: sb.ID})
			for _, in := range left {
				t.Errorf("sandbox %s: environment %s left after cleanup", sb.ID, in.Ref)
				be.Remove(ctx, in.Ref)
			}
		}
	})
	src := testutil.NewRepo(t, map[string]string{"hello.txt": "hello\n"})
	ws, err := cl.CreateWorkspace(t.Context(), client.CreateWorkspace{Repo: src.Dir})
	if err != nil {
		t.Fatal(err)
	}
	return &sandboxFixture{srv: srv, cl: cl, st: st, ws: ws, serverLog: serverLog}
}

// syncBuffer is a buffer written by one goroutine and polled by another.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// waitFor polls until cond holds, failing the test at the deadline.
func waitFor(t *testing.T, what string, d time.Duration, cond func() bool, state func() string) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("waited %s for %s; state:\n%s", d, what, state())
		}
		time.Sleep(10 * time.Millisecond) // polling with a deadline
	}
}

var shellEnv = []string{"PATH=/bin:/usr/bin", "PS1=$ ", "TERM=dumb"}

func TestShellOverWebSocket(t *testing.T) {
	f := newSandboxFixture(t)
	ctx := t.Context()
	sess, err := f.cl.Shell(ctx, f.ws.ID, client.Shell{Env: shellEnv, Rows: 24, Cols: 80})
	if err != nil {
		t.Fatal(err)
	}
	defer sess.Close()
	if sess.ExecID == "" || sess.SandboxID == "" || sess.Replaced {
		t.Errorf("session = %+v", sess)
	}
	var out syncBuffer
	copied := make(chan error, 1)
	go func() {
		_, err := io.Copy(&out, sess)
		copied <- err
	}()
	// Each answer is made by the shell (arithmetic), so the terminal's
	// echo of the command line cannot satisfy the wait.
	step := func(input, want string) {
		t.Helper()
		if _, err := sess.Write([]byte(input)); err != nil {
			t.Fatal(err)
		}
		waitFor(t, fmt.Sprintf("%q after %q", want, input), 20*time.Second, func() bool { return strings.Contains(out.String(), want) }, out.String)
	}
	step("stty size; echo size-$((20+4))\n", "24 80\r\nsize-24")
	if err := sess.Resize(40, 132); err != nil {
		t.Fatal(err)
	}
	step("stty size; echo size-$((40+0))\n", "40 132\r\nsize-40")
	step("tty; echo tty-$((1+1))\n", "/dev/pts/")
	if err := sess.Resize(0, 10); !errors.Is(err, client.ErrInvalid) {
		t.Errorf("resize to 0 rows: %v", err)
	}
	step("exit 7\n", "exit 7")
	exit, err := sess.Wait(ctx)
	if err != nil || exit.ExitCode != 7 || exit.ExecID != sess.ExecID {
		t.Fatalf("exit = %+v, %v; want status 7", exit, err)
	}
	if err := <-copied; err != nil {
		t.Errorf("reading output to the end: %v", err)
	}
	// The session is an exec record like any other.
	rec, err := f.st.GetExec(ctx, sess.ExecID)
	if err != nil || rec.State != store.ExecExited || rec.ExitCode != 7 || rec.Argv != `["/bin/sh"]` || rec.FinishedAt.IsZero() {
		t.Errorf("exec record = %+v, %v", rec, err)
	}
	if _, err := sess.Write([]byte("more\n")); err == nil {
		sess.Close()
	}

	// A command that fails to start is a start error, not a session.
	_, err = f.cl.Shell(ctx, f.ws.ID, client.Shell{Argv: []string{"/no/such/shell"}})
	if err == nil || !strings.Contains(err.Error(), "/no/such/shell") {
		t.Errorf("shell of a missing command: %v", err)
	}
}

// hostPids lists host processes whose command line is exactly argv (the
// processes of a runc sandbox are host processes).
func hostPids(t *testing.T, argv ...string) []string {
	t.Helper()
	want := strings.Join(argv, "\x00") + "\x00"
	dirs, _ := filepath.Glob("/proc/[0-9]*")
	var out []string
	for _, d := range dirs {
		b, err := os.ReadFile(filepath.Join(d, "cmdline"))
		if err == nil && string(b) == want {
			out = append(out, filepath.Base(d))
		}
	}
	return out
}

func TestShellCloseKillsCommand(t *testing.T) {
	f := newSandboxFixture(t)
	ctx := t.Context()
	marker := fmt.Sprint(100000 + rand.IntN(800000))
	sess, err := f.cl.Shell(ctx, f.ws.ID, client.Shell{Env: shellEnv, Argv: []string{"/bin/sh", "-c", "echo ready; sleep " + marker + "; echo never"}})
	if err != nil {
		t.Fatal(err)
	}
	var out syncBuffer
	copied := make(chan struct{})
	go func() {
		io.Copy(&out, sess)
		close(copied)
	}()
	waitFor(t, "ready", 20*time.Second, func() bool { return strings.Contains(out.String(), "ready") }, out.String)
	waitFor(t, "the sleep on the host", 10*time.Second, func() bool { return len(hostPids(t, "sleep", marker)) == 1 }, out.String)
	sess.Close()
	<-copied
	waitFor(t, "the sleep to be killed", 20*time.Second, func() bool { return len(hostPids(t, "sleep", marker)) == 0 },
		func() string { return fmt.Sprint(hostPids(t, "sleep", marker)) })
	waitFor(t, "the exec record to finish", 20*time.Second, func() bool {
		rec, err := f.st.GetExec(ctx, sess.ExecID)
		return err == nil && rec.State == store.ExecKilled && !rec.FinishedAt.IsZero()
	}, func() string { rec, err := f.st.GetExec(ctx, sess.ExecID); return fmt.Sprintf("%+v %v", rec, err) })
	if strings.Contains(out.String(), "never") {
		t.Errorf("the command went on after Close: %q", out.String())
	}
}

func TestShellErrorsAndAuth(t *testing.T) {
	const token = "shell-test-token-0123456789"
	f := newFixture(t, token)
	ctx := t.Context()
	_, err := f.cl.Shell(ctx, "ws_nope", client.Shell{})
	if !errors.Is(err, client.ErrNotFound) || !strings.Contains(err.Error(), "ws_nope") {
		t.Errorf("unknown workspace: %v", err)
	}
	_, err = f.cl.Shell(ctx, "sb_aaaaaaaaaaaa", client.Shell{})
	if !errors.Is(err, client.ErrNotFound) || !strings.Contains(err.Error(), "sb_aaaaaaaaaaaa") {
		t.Errorf("unknown sandbox: %v", err)
	}
	_, err = f.cl.Shell(ctx, "ws_nope", client.Shell{Env: []string{"NOEQUALS"}})
	if !errors.Is(err, client.ErrInvalid) {
		t.Errorf("bad env: %v", err)
	}
	noToken, _ := client.New(f.srv.URL, "")
	if _, err := noToken.Shell(ctx, "ws_nope", client.Shell{}); !errors.Is(err, client.ErrUnauthorized) {
		t.Errorf("without the token: %v", err)
	}
	// A plain GET gets a JSON error naming what is missing.
	req, _ := http.NewRequestWithContext(ctx, "GET", f.srv.URL+"/v1/workspaces/ws_nope/shell", nil)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var eb api.ErrorBody
	json.NewDecoder(resp.Body).Decode(&eb)
	resp.Body.Close()
	if resp.StatusCode != 400 || !strings.Contains(eb.Error.Message, "WebSocket") {
		t.Errorf("plain GET: %d %+v", resp.StatusCode, eb)
	}
}

// patternReader yields n deterministic pseudo-random bytes.
type patternReader struct {
	rng *rand.ChaCha8
	n   int64
}

func (r *patternReader) Read(b []byte) (int, error) {
	if r.n == 0 {
		return 0, io.EOF
	}
	if int64(len(b)) > r.n {
		b = b[:r.n]
	}
	r.rng.Read(b)
	r.n -= int64(len(b))
	return len(b), nil
}

func TestExecStdinStreaming(t *testing.T) {
	f := newSandboxFixture(t)
	ctx := t.Context()
	env := []string{"PATH=/bin:/usr/bin"}

	t.Run("large", func(t *testing.T) {
		const size = 24 << 20 // over the 16 MiB of a one-document request
		h := sha256.New()
		io.Copy(h, &patternReader{rng: rand.NewChaCha8([32]byte{1}), n: size})
		want := hex.EncodeToString(h.Sum(nil))
		var out, errb bytes.Buffer
		res, err := f.cl.ExecStdin(ctx, f.ws.ID, client.Exec{Argv: []string{"sh", "-c", "tee /tmp/in | sha256sum; wc -c < /tmp/in"}, Env: env},
			&patternReader{rng: rand.NewChaCha8([32]byte{1}), n: size}, &out, &errb)
		if err != nil || res.ExitCode != 0 {
			t.Fatalf("exec = %+v, %v; stderr %s", res, err, errb.String())
		}
		if got := strings.Fields(out.String()); len(got) < 3 || got[0] != want || got[2] != fmt.Sprint(size) {
			t.Errorf("sandbox saw %q; want sha256 %s and %d bytes", out.String(), want, size)
		}
	})

	t.Run("line by line", func(t *testing.T) {
		// Each line is sent only after the command answered the one
		// before: request and reply are one full-duplex exchange.
		pr, pw := io.Pipe()
		defer pw.Close()
		var out syncBuffer
		done := make(chan error, 1)
		var res client.ExecResult
		go func() {
			var err error
			res, err = f.cl.ExecStdin(ctx, f.ws.ID, client.Exec{Argv: []string{"sh", "-c", `while read l; do echo "got $l"; done; echo bye`}, Env: env}, pr, &out, nil)
			done <- err
		}()
		for i := range 5 {
			fmt.Fprintf(pw, "line %d\n", i)
			want := fmt.Sprintf("got line %d\n", i)
			waitFor(t, want, 20*time.Second, func() bool { return strings.Contains(out.String(), want) }, out.String)
		}
		pw.Close() // EOF ends the loop
		if err := <-done; err != nil || res.ExitCode != 0 || !strings.HasSuffix(out.String(), "got line 4\nbye\n") {
			t.Errorf("exec = %+v, %v; output %q", res, err, out.String())
		}
	})

	t.Run("binary and early exit", func(t *testing.T) {
		in := []byte{0, 0xff, 0xfe, '\n', 'x'}
		var out bytes.Buffer
		res, err := f.cl.ExecStdin(ctx, f.ws.ID, client.Exec{Argv: []string{"od", "-An", "-tx1"}, Env: env}, bytes.NewReader(in), &out, nil)
		if err != nil || res.ExitCode != 0 || strings.Join(strings.Fields(out.String()), " ") != "00 ff fe 0a 78" {
			t.Errorf("od = %+v, %v, %q", res, err, out.String())
		}
		// A command that stops reading ends the exchange even though
		// the input never ends.
		pr, pw := io.Pipe()
		defer pw.Close()
		go io.Copy(pw, &patternReader{rng: rand.NewChaCha8([32]byte{2}), n: 1 << 40})
		out.Reset()
		res, err = f.cl.ExecStdin(ctx, f.ws.ID, client.Exec{Argv: []string{"head", "-c", "5"}, Env: env}, pr, &out, nil)
		if err != nil || res.ExitCode != 0 || out.Len() != 5 {
			t.Errorf("head = %+v, %v, %d bytes", res, err, out.Len())
		}
		pr.Close()
	})

	t.Run("body ended after the result", func(t *testing.T) {
		// The client ends its body only once it has read the result,
		// then sends the next request on the same connection. The
		// server must have taken the whole body in before the handler
		// returned: net/http panics ("invalid concurrent Body.Read
		// call") on a kept-alive connection whose full-duplex body it
		// had to finish itself (golang/go#68560).
		cases := []struct {
			name  string
			argv  []string
			lines []string
			more  bool // keep uploading until the result is in
			want  string
		}{
			{"stdin_eof", []string{"cat"}, []string{`{"stdin":"hi\n"}`, `{"stdin_eof":true}`}, false, `"exit_code":0`},
			{"bad line", []string{"cat"}, []string{`{"stdin":"hi\n"}`, `{"stdin_b64":"!!"}`}, false, `"code":"invalid"`},
			{"early exit", []string{"head", "-c", "1"}, []string{`{"stdin":"hi\n"}`}, true, `"exit_code":0`},
		}
		for round := range 3 {
			for _, c := range cases {
				logged := len(f.serverLog.String())
				conn, err := net.Dial("tcp", f.srv.Listener.Addr().String())
				if err != nil {
					t.Fatal(err)
				}
				conn.SetDeadline(time.Now().Add(60 * time.Second))
				res, err := rawStreamedExec(conn, f.ws.ID, c.argv, env, c.lines, c.more)
				if err != nil || !strings.Contains(res, c.want) {
					t.Errorf("round %d, %s: exec = %s, %v; want %s", round, c.name, res, err, c.want)
				}
				// The same connection serves the next request.
				fmt.Fprintf(conn, "GET /v1/health HTTP/1.1\r\nHost: agentbox\r\n\r\n")
				resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
				if err != nil {
					t.Errorf("round %d, %s: next request on the connection: %v", round, c.name, err)
				} else if resp.StatusCode != 200 {
					t.Errorf("round %d, %s: next request on the connection: %s", round, c.name, resp.Status)
				}
				conn.Close()
				if l := f.serverLog.String()[logged:]; strings.Contains(l, "panic") {
					t.Errorf("round %d, %s: the server panicked:\n%s", round, c.name, l)
				}
			}
		}
	})

	t.Run("body that never ends", func(t *testing.T) {
		// A client that goes on uploading after the result gets the
		// grace period, then the server cuts the read short and closes
		// the connection, whose rest cannot be a request.
		logged := len(f.serverLog.String())
		conn, err := net.Dial("tcp", f.srv.Listener.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		conn.SetDeadline(time.Now().Add(60 * time.Second))
		first, _ := json.Marshal(map[string]any{"argv": []string{"true"}, "env": env})
		wrote := make(chan error, 1)
		go func() {
			_, err := fmt.Fprintf(conn, "POST /v1/workspaces/%s/exec HTTP/1.1\r\nHost: agentbox\r\nContent-Type: application/x-ndjson\r\nTransfer-Encoding: chunked\r\n\r\n%x\r\n%s\n\r\n", f.ws.ID, len(first)+1, first)
			for err == nil {
				time.Sleep(20 * time.Millisecond) // a slow upload
				_, err = fmt.Fprintf(conn, "%x\r\n%s\n\r\n", len(`{"stdin":"more"}`)+1, `{"stdin":"more"}`)
			}
			wrote <- err
		}()
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(resp.Body)
		if !strings.Contains(string(b), `"exit_code":0`) || err == nil {
			t.Errorf("exec stream = %q, %v; want the result, then the connection closed", b, err)
		}
		if err := <-wrote; err == nil {
			t.Errorf("the upload went on")
		}
		if l := f.serverLog.String()[logged:]; strings.Contains(l, "panic") {
			t.Errorf("the server panicked:\n%s", l)
		}
	})

	t.Run("protocol errors", func(t *testing.T) {
		post := func(body string) (int, string) {
			req, _ := http.NewRequestWithContext(ctx, "POST", f.srv.URL+"/v1/workspaces/"+f.ws.ID+"/exec", strings.NewReader(body))
			req.Header.Set("Content-Type", "application/x-ndjson")
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			return resp.StatusCode, string(b)
		}
		if code, body := post(`{"argv":["cat"],"stdin":"x"}` + "\n"); code != 400 || !strings.Contains(body, "stdin lines") {
			t.Errorf("stdin field in a stream: %d %s", code, body)
		}
		if code, body := post(`{"argv":["cat"],"bogus":1}` + "\n"); code != 400 || !strings.Contains(body, "bogus") {
			t.Errorf("unknown field: %d %s", code, body)
		}
		code, body := post(`{"argv":["cat"],"env":["PATH=/bin"]}` + "\n" + `{"stdin":"ok\n"}` + "\n" + `{"stdin_b64":"!!"}` + "\n")
		if code != 200 || !strings.Contains(body, `"code":"invalid"`) || !strings.Contains(body, "stdin line 2") {
			t.Errorf("bad base64: %d %s", code, body)
		}
	})
}

// rawStreamedExec runs a streamed exec over conn, writing HTTP/1.1 by
// hand so that the body's end is under the test's control: the request
// line and lines go out as chunks (more: followed by a stdin chunk every
// few milliseconds), and the body ends only once the result or error line
// is in. It returns that line, with the response read to its end so that
// conn is ready for the next request.
func rawStreamedExec(conn net.Conn, ws string, argv, env, lines []string, more bool) (string, error) {
	first, _ := json.Marshal(map[string]any{"argv": argv, "env": env})
	gotResult := make(chan struct{})
	wrote := make(chan error, 1)
	go func() {
		chunk := func(line string) error {
			_, err := fmt.Fprintf(conn, "%x\r\n%s\n\r\n", len(line)+1, line)
			return err
		}
		_, err := fmt.Fprintf(conn, "POST /v1/workspaces/%s/exec HTTP/1.1\r\nHost: agentbox\r\nContent-Type: application/x-ndjson\r\nTransfer-Encoding: chunked\r\n\r\n", ws)
		for _, l := range append([]string{string(first)}, lines...) {
			if err == nil {
				err = chunk(l)
			}
		}
		for more && err == nil {
			select {
			case <-gotResult:
				more = false
			case <-time.After(5 * time.Millisecond):
				err = chunk(`{"stdin":"more\n"}`)
			}
		}
		if err == nil {
			<-gotResult
			_, err = io.WriteString(conn, "0\r\n\r\n")
		}
		wrote <- err
	}()
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		close(gotResult)
		<-wrote
		return "", err
	}
	defer resp.Body.Close()
	br := bufio.NewReader(resp.Body)
	var last string
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			close(gotResult)
			<-wrote
			return "", fmt.Errorf("reading the exec stream: %w (status %s)", err, resp.Status)
		}
		if strings.HasPrefix(line, `{"result"`) || strings.HasPrefix(line, `{"error"`) {
			last = line
			break
		}
	}
	close(gotResult)
	if err := <-wrote; err != nil {
		return last, fmt.Errorf("sending the request body: %w", err)
	}
	if _, err := io.Copy(io.Discard, br); err != nil {
		return last, fmt.Errorf("reading the exec stream to its end: %w", err)
	}
	return last, nil
}

// sseEvent is one Server-Sent Event.
type sseEvent struct {
	Event string
	Data  map[string]any
}

func TestExecSSE(t *testing.T) {
	f := newSandboxFixture(t)
	ctx := t.Context()
	body := `{"argv":["sh","-c","echo out; echo err >&2; printf '\\377'; exit 3"],"env":["PATH=/bin"]}`
	req, _ := http.NewRequestWithContext(ctx, "POST", f.srv.URL+"/v1/workspaces/"+f.ws.ID+"/exec", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "text/event-stream")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Fatalf("Content-Type = %q", ct)
	}
	var events []sseEvent
	var cur sseEvent
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == "":
			if cur.Event == "" || cur.Data == nil {
				t.Fatalf("incomplete event before a blank line: %+v", cur)
			}
			events = append(events, cur)
			cur = sseEvent{}
		case strings.HasPrefix(line, "event: "):
			cur.Event = strings.TrimPrefix(line, "event: ")
		case strings.HasPrefix(line, "data: "):
			if cur.Data != nil {
				t.Fatalf("two data lines in one event")
			}
			if err := json.Unmarshal([]byte(strings.TrimPrefix(line, "data: ")), &cur.Data); err != nil {
				t.Fatalf("data is not one line of JSON: %q", line)
			}
		default:
			t.Fatalf("unexpected SSE line %q", line)
		}
	}
	// Each chunk is text when it is valid UTF-8 and base64 otherwise; how
	// the writes were cut into chunks is up to the pipe, so compare the
	// bytes each stream carried, in order.
	got := map[string]string{}
	b64 := false
	for _, e := range events[:len(events)-1] {
		if d, ok := e.Data["data"].(string); ok {
			got[e.Event] += d
		}
		if d, ok := e.Data["data_b64"].(string); ok {
			raw, err := base64.StdEncoding.DecodeString(d)
			if err != nil {
				t.Fatalf("data_b64 %q: %v", d, err)
			}
			got[e.Event] += string(raw)
			b64 = true
		}
	}
	if got["stdout"] != "out\n\xff" || got["stderr"] != "err\n" || !b64 {
		t.Errorf("output events = %q (a base64 chunk: %v)", got, b64)
	}
	last := events[len(events)-1]
	if last.Event != "result" || last.Data["exit_code"] != 3.0 || last.Data["exec_id"] == "" {
		t.Errorf("last event = %+v", last)
	}
	// An error once the stream started is an error event.
	req, _ = http.NewRequestWithContext(ctx, "POST", f.srv.URL+"/v1/workspaces/"+f.ws.ID+"/exec", strings.NewReader(`{"argv":["/no/such/program"]}`))
	req.Header.Set("Accept", "text/event-stream")
	resp2, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp2.Body)
	resp2.Body.Close()
	if !strings.HasPrefix(string(b), "event: error\ndata: {\"code\":\"invalid\"") || !strings.Contains(string(b), "/no/such/program") {
		t.Errorf("error as SSE: %q", b)
	}
	// An unknown target is an error reply before any stream.
	req, _ = http.NewRequestWithContext(ctx, "POST", f.srv.URL+"/v1/workspaces/ws_nope/exec", strings.NewReader(`{"argv":["true"]}`))
	req.Header.Set("Accept", "text/event-stream")
	resp3, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ = io.ReadAll(resp3.Body)
	resp3.Body.Close()
	if resp3.StatusCode != http.StatusNotFound || !strings.Contains(string(b), `"code":"not_found"`) || !strings.Contains(string(b), "ws_nope") {
		t.Errorf("unknown workspace with SSE: %d %q", resp3.StatusCode, b)
	}
}

// TestExecBuffered runs the buffered exec (Accept: application/json)
// through the Go client: output and outcome in one reply, input as a field
// or streamed, the cap, bytes that are not UTF-8, and its errors.
func TestExecBuffered(t *testing.T) {
	f := newSandboxFixture(t)
	ctx := t.Context()
	out, err := f.cl.ExecBuffered(ctx, f.ws.ID, client.Exec{Sh: "cat; echo err >&2; printf '\\377'; exit 4", Stdin: "in\n"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if out.Stdout != "in\n\uFFFD" || out.StdoutB64 != base64.StdEncoding.EncodeToString([]byte("in\n\xff")) || out.Stderr != "err\n" || out.StderrB64 != "" ||
		out.ExitCode != 4 || out.Signal != 0 || out.TimedOut || out.OOM || out.Truncated || out.ExecID == "" || out.StdoutBytes != 4 {
		t.Errorf("buffered exec = %+v", out)
	}
	// Input streamed, output buffered.
	big := strings.Repeat("0123456789abcdef", 1<<16) // 1 MiB
	out, err = f.cl.ExecBuffered(ctx, f.ws.ID, client.Exec{Argv: []string{"sha256sum"}}, strings.NewReader(big))
	if want := fmt.Sprintf("%x", sha256.Sum256([]byte(big))); err != nil || !strings.HasPrefix(out.Stdout, want) {
		t.Errorf("1 MiB of streamed input: %+v, %v; want %s", out, err, want)
	}
	// Each stream keeps its cap, then the note; the command runs on.
	out, err = f.cl.ExecBuffered(ctx, f.ws.ID, client.Exec{Sh: "head -c 100000 /dev/zero | tr '\\0' a; echo done >&2", MaxOutputBytes: 1000}, nil)
	if err != nil || !out.Truncated || !out.StdoutTruncated || out.StdoutBytes != 100000 || !strings.HasPrefix(out.Stdout, strings.Repeat("a", 1000)+"\n[agentbox: output truncated") || out.Stderr != "done\n" {
		t.Errorf("capped buffered exec = %+v (%d bytes of stdout), %v", out, len(out.Stdout), err)
	}
	// The default cap is 1 MiB.
	out, err = f.cl.ExecBuffered(ctx, f.ws.ID, client.Exec{Sh: "head -c 2000000 /dev/zero"}, nil)
	if err != nil || !out.Truncated || len(out.Stdout) > manager.DefaultBufferedOutput+100 {
		t.Errorf("default cap: truncated %v, %d bytes, %v", out.Truncated, len(out.Stdout), err)
	}
	out, err = f.cl.ExecBuffered(ctx, f.ws.ID, client.Exec{Argv: []string{"sleep", "30"}, Timeout: "500ms"}, nil)
	if err != nil || !out.TimedOut {
		t.Errorf("timeout = %+v, %v", out, err)
	}
	for name, tc := range map[string]struct {
		target string
		req    client.Exec
		want   error
		msg    string
	}{
		"over the cap":   {f.ws.ID, client.Exec{Argv: []string{"true"}, MaxOutputBytes: 17 << 20}, client.ErrInvalid, "stream the output"},
		"no program":     {f.ws.ID, client.Exec{Argv: []string{"/no/such/program"}}, client.ErrInvalid, "/no/such/program"},
		"argv and sh":    {f.ws.ID, client.Exec{Argv: []string{"true"}, Sh: "true"}, client.ErrInvalid, "not both"},
		"unknown target": {"ws_nope", client.Exec{Argv: []string{"true"}}, client.ErrNotFound, "ws_nope"},
		"empty target":   {"", client.Exec{Argv: []string{"true"}}, client.ErrNotFound, `""`},
	} {
		if _, err := f.cl.ExecBuffered(ctx, tc.target, tc.req, nil); !errors.Is(err, tc.want) || !strings.Contains(err.Error(), tc.msg) {
			t.Errorf("%s: %v, want %v mentioning %q", name, err, tc.want, tc.msg)
		}
	}
}
