package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/agentbox/agentbox/client"
	"github.com/agentbox/agentbox/internal/image"
	"github.com/agentbox/agentbox/internal/store"
	"github.com/agentbox/agentbox/internal/testutil"
	"github.com/agentbox/agentbox/internal/testutil/skip"
)

// shutdownDaemon starts a daemon whose sandboxes default to busybox on
// docker, with the given shutdown grace, and a workspace with a running
// sandbox. It returns the daemon, its client and the workspace.
func shutdownDaemon(t *testing.T, grace time.Duration) (*daemonProc, *client.Client, client.Workspace, client.Sandbox) {
	t.Helper()
	if err := exec.Command("docker", "info").Run(); err != nil {
		skip.OrFail(t, fmt.Sprintf("no docker engine: %v", err))
	}
	if _, err := image.Build(t.Context(), image.BuildOptions{Kind: image.KindBusybox}); err != nil {
		t.Fatal(err)
	}
	data := t.TempDir()
	cfg := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(cfg, fmt.Appendf(nil, "shutdown_grace: %s\ndefault_backend: docker\ndefault_image: agentbox/busybox:latest\n", grace), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("AGENTBOX_CONFIG", cfg)
	src := testutil.NewRepo(t, map[string]string{"hello.txt": "hello\n"})
	d := startDaemon(t, data)
	cleanupAll(t, data)
	cl := d.client(t)
	ctx := t.Context()
	ws, err := cl.CreateWorkspace(ctx, client.CreateWorkspace{Repo: src.Dir})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cl.WriteFile(ctx, ws.ID, "acked.txt", strings.NewReader("acknowledged\n"), 0, false); err != nil {
		t.Fatal(err)
	}
	sb, err := cl.CreateSandbox(ctx, client.CreateSandbox{Workspace: ws.ID})
	if err != nil {
		t.Fatal(err)
	}
	return d, cl, ws, sb
}

// startedWriter closes started at the first byte written to it.
type startedWriter struct {
	once    sync.Once
	started chan struct{}
	mu      sync.Mutex
	buf     bytes.Buffer
}

func newStartedWriter() *startedWriter { return &startedWriter{started: make(chan struct{})} }

func (w *startedWriter) Write(b []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf.Write(b)
	w.once.Do(func() { close(w.started) })
	return len(b), nil
}

func (w *startedWriter) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.String()
}

func waitStarted(t *testing.T, w *startedWriter, what string) {
	t.Helper()
	select {
	case <-w.started:
	case <-time.After(60 * time.Second):
		t.Fatalf("%s did not start", what)
	}
}

// waitExit waits for the daemon to exit after SIGTERM and checks that it
// exited cleanly.
func waitExit(t *testing.T, d *daemonProc, within time.Duration) {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- d.cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("daemon exit after SIGTERM: %v\n%s", err, d.logs)
		}
	case <-time.After(within):
		d.cmd.Process.Kill()
		<-done
		t.Fatalf("daemon still running %s after SIGTERM\n%s", within, d.logs)
	}
}

// checkStoppedState opens the stopped daemon's database and checks that
// it left nothing half-done: no exec still running, no sandbox running
// or being created, and no container of its sandboxes.
func checkStoppedState(t *testing.T, data string) []store.Exec {
	t.Helper()
	st := openDataStore(t, data)
	defer st.Close()
	execs, err := st.ListExecs(t.Context(), store.ExecFilter{})
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range execs {
		if e.State == store.ExecRunning || e.FinishedAt.IsZero() {
			t.Errorf("exec %s %s left %s (finished %v) by a graceful stop", e.ID, e.Argv, e.State, e.FinishedAt)
		}
	}
	sbs, err := st.ListSandboxes(t.Context(), store.SandboxFilter{})
	if err != nil {
		t.Fatal(err)
	}
	for _, sb := range sbs {
		if sb.State != "stopped" {
			t.Errorf("sandbox %s left %s by a graceful stop, want stopped", sb.ID, sb.State)
		}
		if sb.BackendRef == "" {
			continue
		}
		if out, err := exec.Command("docker", "inspect", "--format", "{{.State.Status}}", sb.BackendRef).CombinedOutput(); err == nil {
			t.Errorf("sandbox %s: container %.12s outlived the daemon (%s)", sb.ID, sb.BackendRef, strings.TrimSpace(string(out)))
		}
	}
	return execs
}

// checkResumes restarts the daemon and checks that the workspace is back
// (acknowledged file readable) and the next exec runs, in a replacement.
func checkResumes(t *testing.T, data string, ws client.Workspace, old string) {
	t.Helper()
	d := startDaemon(t, data)
	defer d.stop(t)
	cl := d.client(t)
	ctx := t.Context()
	var b bytes.Buffer
	if _, err := cl.ReadFile(ctx, ws.ID, "acked.txt", &b); err != nil || b.String() != "acknowledged\n" {
		t.Errorf("after restart: acked.txt = %q, %v", b.String(), err)
	}
	var out bytes.Buffer
	res, err := cl.Exec(ctx, ws.ID, client.Exec{Argv: []string{"cat", "acked.txt", "hello.txt"}}, &out, io.Discard)
	if err != nil || res.ExitCode != 0 || out.String() != "acknowledged\nhello\n" {
		t.Fatalf("exec after restart: %+v %q %v", res, out.String(), err)
	}
	if !res.Replaced || res.SandboxID == old {
		t.Errorf("exec after restart ran in %s (replaced %v), want a replacement of %s", res.SandboxID, res.Replaced, old)
	}
}

// TestGracefulShutdownLetsExecsFinish: on SIGTERM the daemon stops taking
// requests at once, lets a running command finish with its own exit code
// within the grace period, stops its sandboxes and exits; the next start
// resumes the workspace.
func TestGracefulShutdownLetsExecsFinish(t *testing.T) {
	d, cl, ws, sb := shutdownDaemon(t, 30*time.Second)
	out := newStartedWriter()
	type result struct {
		res client.ExecResult
		err error
		at  time.Time
	}
	done := make(chan result, 1)
	go func() {
		res, err := cl.Exec(context.Background(), ws.ID, client.Exec{Argv: []string{"sh", "-c", "echo started; sleep 3; echo finished; exit 7"}}, out, io.Discard)
		done <- result{res, err, time.Now()}
	}()
	waitStarted(t, out, "sh -c 'sleep 3; exit 7'")
	// A shell session (its connection taken over by the WebSocket, which
	// http.Server.Shutdown does not wait for) finishes as well.
	sh, err := cl.Shell(t.Context(), ws.ID, client.Shell{Argv: []string{"sh", "-c", "echo shell-started; sleep 4; exit 5"}})
	if err != nil {
		t.Fatal(err)
	}
	defer sh.Close()
	shOut := newStartedWriter()
	go io.Copy(shOut, sh)
	waitStarted(t, shOut, "the shell session")
	d.cmd.Process.Signal(syscall.SIGTERM)

	// New requests are refused while the command still runs: a fresh
	// client (no kept-alive connection) gets no answer.
	fresh := d.client(t)
	var refusedAt time.Time
	deadline := time.Now().Add(10 * time.Second)
	for {
		_, err := fresh.Health(t.Context())
		if err != nil {
			var ce *client.Error
			if errors.As(err, &ce) {
				t.Fatalf("request after SIGTERM: the daemon answered %v, want the connection refused", err)
			}
			refusedAt = time.Now()
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the daemon still accepts requests 10s after SIGTERM")
		}
		time.Sleep(10 * time.Millisecond) // polling for the listener to close, bounded
	}
	r := <-done
	if r.err != nil || r.res.ExitCode != 7 || r.res.Canceled || out.String() != "started\nfinished\n" {
		t.Fatalf("command running at SIGTERM: %+v %q %v, want exit 7 after its whole output", r.res, out.String(), r.err)
	}
	if !refusedAt.Before(r.at) {
		t.Errorf("new requests were refused only at %v, after the running command ended at %v", refusedAt, r.at)
	}
	wctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	if ex, err := sh.Wait(wctx); err != nil || ex.ExitCode != 5 || ex.Canceled || ex.Lost {
		t.Errorf("shell session running at SIGTERM ended as %+v, %v; want exit 5", ex, err)
	}
	waitExit(t, d, time.Minute)
	execs := checkStoppedState(t, d.data)
	found := false
	for _, e := range execs {
		if strings.Contains(e.Argv, "exit 5") && (e.State != store.ExecExited || e.ExitCode != 5) {
			t.Errorf("shell session %s recorded %s exit %d, want exited 5", e.ID, e.State, e.ExitCode)
		}
		if strings.Contains(e.Argv, "exit 7") {
			found = true
			if e.State != store.ExecExited || e.ExitCode != 7 {
				t.Errorf("exec %s recorded %s exit %d, want exited 7", e.ID, e.State, e.ExitCode)
			}
		}
	}
	if !found {
		t.Error("the command running at SIGTERM has no exec record")
	}
	checkResumes(t, d.data, ws, sb.ID)
}

// TestGracefulShutdownEndsWorkBeyondGrace: a command and a shell session
// still running when the grace period ends are ended (the command is
// killed and says it was canceled), their records end, the sandbox is
// stopped and the next start resumes.
func TestGracefulShutdownEndsWorkBeyondGrace(t *testing.T) {
	d, cl, ws, sb := shutdownDaemon(t, time.Second)
	out := newStartedWriter()
	type result struct {
		res client.ExecResult
		err error
	}
	done := make(chan result, 1)
	go func() {
		res, err := cl.Exec(context.Background(), ws.ID, client.Exec{Argv: []string{"sh", "-c", "echo started; exec sleep 120"}}, out, io.Discard)
		done <- result{res, err}
	}()
	waitStarted(t, out, "sleep 120")
	sh, err := cl.Shell(t.Context(), ws.ID, client.Shell{Argv: []string{"sh", "-c", "echo shell-started; exec sleep 120"}})
	if err != nil {
		t.Fatal(err)
	}
	defer sh.Close()
	shOut := newStartedWriter()
	go io.Copy(shOut, sh)
	waitStarted(t, shOut, "the shell session")

	d.cmd.Process.Signal(syscall.SIGTERM)
	waitExit(t, d, time.Minute)
	select {
	case r := <-done:
		if r.err == nil && !r.res.Canceled {
			t.Errorf("command cut by the end of the grace period: %+v, want it canceled (or the stream cut)", r.res)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the exec call still waits after the daemon exited")
	}
	wctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if ex, err := sh.Wait(wctx); errors.Is(err, context.DeadlineExceeded) {
		t.Fatal("the shell session still waits after the daemon exited")
	} else if err == nil && ex.ExitCode == 0 && !ex.Canceled && !ex.Lost && ex.Signal == 0 {
		t.Errorf("shell session cut by the end of the grace period ended as %+v", ex)
	}
	for _, e := range checkStoppedState(t, d.data) {
		if strings.Contains(e.Argv, "sleep 120") && e.State != store.ExecKilled {
			t.Errorf("exec %s %s recorded as %s, want killed", e.ID, e.Argv, e.State)
		}
	}
	checkResumes(t, d.data, ws, sb.ID)
}
