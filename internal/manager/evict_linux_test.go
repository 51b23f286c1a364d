package manager

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/agentbox/agentbox/internal/errdefs"
	"github.com/agentbox/agentbox/internal/guest"
	"github.com/agentbox/agentbox/internal/sandbox"
	"github.com/agentbox/agentbox/internal/store"
)

// evictHarness is a docker harness whose manager evicts.
func evictHarness(t *testing.T, idle, maxAge time.Duration) (*harness, sandbox.Backend) {
	h, be := sandboxHarness(t)
	base := h.configure
	h.configure = func(c *Config) {
		base(c)
		c.IdleTimeout, c.MaxAge = idle, maxAge
	}
	h.reopen()
	return h, be
}

// runLong starts a long command in the workspace and returns once the
// command itself runs (it wrote its marker; the exec row says running as
// soon as the command is sent, before the guest confirms its start);
// stop ends it and waits for its outcome.
func runLong(t *testing.T, h *harness, wsID string) (stop func() (ExecOutcome, error)) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	type ended struct {
		out ExecOutcome
		err error
	}
	done := make(chan ended, 1)
	marker := "started-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	go func() {
		res, err := h.m.Exec(ctx, wsID, guest.ExecRequest{
			Argv: []string{"sh", "-c", "echo > /workspace/" + marker + "; exec sleep 60"},
			Env:  []string{"PATH=/bin"}, Timeout: time.Minute,
		}, nil, io.Discard, io.Discard)
		done <- ended{res, err}
	}()
	deadline := time.Now().Add(15 * time.Second)
	for {
		if _, ok := h.readFile(wsID, marker); ok {
			break
		}
		select {
		case e := <-done:
			t.Fatalf("the long command ended before it ran: %+v %v", e.out, e.err)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("the long command never ran")
		}
		time.Sleep(20 * time.Millisecond)
	}
	return func() (ExecOutcome, error) { cancel(); e := <-done; return e.out, e.err }
}

func TestEvictIdle(t *testing.T) {
	h, be := evictHarness(t, time.Minute, 0)
	ctx := t.Context()
	w := h.create(CreateRequest{Repo: h.repo.ID})
	res, _, _ := h.exec(w.ID, "sh", "-c", "echo kept > /workspace/kept.txt")
	sb, _ := h.m.GetSandbox(ctx, res.SandboxID)
	later := time.Now().Add(2 * time.Minute)

	if ev, err := h.m.Evict(ctx, time.Now()); err != nil || len(ev) != 0 {
		t.Fatalf("a sandbox used just now was evicted: %v %v", ev, err)
	}
	// Past its idle time, but a command runs: a long test run is not idle.
	stop := runLong(t, h, w.ID)
	if ev, err := h.m.Evict(ctx, later); err != nil || len(ev) != 0 {
		t.Errorf("a sandbox running a command was evicted as idle: %v %v", ev, err)
	}
	stop()
	// Now idle: evicted, its environment gone, the workspace kept.
	ev, err := h.m.Evict(ctx, later)
	if err != nil || !slices.Equal(ev, []string{sb.ID}) {
		t.Fatalf("Evict = %v, %v; want %s", ev, err, sb.ID)
	}
	if got, _ := h.m.GetSandbox(ctx, sb.ID); got.State != string(sandbox.StateStopped) {
		t.Errorf("evicted sandbox state %s, want stopped", got.State)
	}
	if _, err := be.Inspect(ctx, sb.BackendRef); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("the evicted sandbox's environment: %v", err)
	}
	evs := h.events(w.ID, "sandbox.evicted")
	if len(evs) != 1 {
		t.Fatalf("%d sandbox.evicted events", len(evs))
	}
	var d struct{ Reason string }
	json.Unmarshal([]byte(evs[0].Detail), &d)
	if d.Reason != EvictIdle {
		t.Errorf("eviction reason %q", d.Reason)
	}
	res, out, _ := h.exec(w.ID, "cat", "/workspace/kept.txt")
	if !res.Replaced || out != "kept\n" {
		t.Errorf("exec after eviction: %+v %q", res, out)
	}
}

func TestEvictMaxAge(t *testing.T) {
	h, _ := evictHarness(t, 0, time.Minute)
	ctx := t.Context()
	w := h.create(CreateRequest{Repo: h.repo.ID})
	res, _, _ := h.exec(w.ID, "true")
	stop := runLong(t, h, w.ID)
	// Too old: evicted even with a command running, which ends.
	ev, err := h.m.Evict(ctx, time.Now().Add(2*time.Minute))
	if err != nil || !slices.Equal(ev, []string{res.SandboxID}) {
		t.Fatalf("Evict = %v, %v; want %s", ev, err, res.SandboxID)
	}
	// Whichever comes first, the container's removal killing the command
	// or the guest connection closing, the command must not look done.
	if out, err := stop(); err == nil && out.ExitCode == 0 && out.Signal == 0 {
		t.Errorf("the command in the evicted sandbox ended as a success: %+v", out.ExecResult)
	}
	if got, _ := h.m.GetSandbox(ctx, res.SandboxID); got.State != string(sandbox.StateStopped) {
		t.Errorf("state %s, want stopped", got.State)
	}
}

// With no limits configured nothing is ever evicted.
func TestEvictOff(t *testing.T) {
	h, _ := evictHarness(t, 0, 0)
	w := h.create(CreateRequest{Repo: h.repo.ID})
	h.exec(w.ID, "true")
	if ev, err := h.m.Evict(t.Context(), time.Now().Add(24*time.Hour)); err != nil || len(ev) != 0 {
		t.Errorf("Evict without limits = %v, %v", ev, err)
	}
}

// A sandbox's own lifetime ends it on time, with a command running, on
// its own (no eviction pass); the next exec heals.
func TestSandboxLifetime(t *testing.T) {
	h, be := sandboxHarness(t)
	ctx := t.Context()
	w := h.create(CreateRequest{Repo: h.repo.ID})
	sb, err := h.m.CreateSandbox(ctx, w.ID, sandbox.Spec{Lifetime: 3 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	done := make(chan struct{})
	var out ExecOutcome
	go func() {
		defer close(done)
		out, err = h.m.Exec(ctx, w.ID, guest.ExecRequest{Argv: []string{"sleep", "60"}, Env: []string{"PATH=/bin"}, Timeout: time.Minute}, nil, io.Discard, io.Discard)
	}()
	select {
	case <-done:
	case <-time.After(45 * time.Second):
		t.Fatal("the command outlived its sandbox's 3s lifetime by 45s")
	}
	t.Logf("the command ended after %s: %+v %v", time.Since(start).Round(time.Millisecond), out.ExecResult, err)
	if err == nil && out.ExitCode == 0 && out.Signal == 0 {
		t.Errorf("a command outliving its sandbox's lifetime ended as a success: %+v", out.ExecResult)
	}
	if got, _ := h.m.GetSandbox(ctx, sb.ID); got.State != string(sandbox.StateStopped) {
		t.Errorf("state %s after its lifetime, want stopped", got.State)
	}
	if _, err := be.Inspect(ctx, sb.BackendRef); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("the expired sandbox's environment: %v", err)
	}
	evs := h.events(w.ID, "sandbox.evicted")
	if len(evs) != 1 || !strings.Contains(evs[0].Detail, EvictLifetime) {
		t.Errorf("eviction events %+v, want one for its lifetime", evs)
	}
	res, _, _ := h.exec(w.ID, "true")
	if !res.Replaced || res.ExitCode != 0 {
		t.Errorf("exec after the lifetime: %+v", res)
	}
}

// A command running when the daemon died is recorded lost by the next
// daemon, not left running for ever.
func TestExecRunningAtCrashIsLost(t *testing.T) {
	h, _ := sandboxHarness(t)
	w := h.create(CreateRequest{Repo: h.repo.ID})
	stop := runLong(t, h, w.ID)
	defer stop()
	execs, err := h.st.ListExecs(t.Context(), store.ExecFilter{WorkspaceID: w.ID})
	if err != nil || len(execs) != 1 || execs[0].State != store.ExecRunning {
		t.Fatalf("execs before the crash: %+v, %v", execs, err)
	}
	h.reopen() // a new daemon on the same data; the old one never ends its exec
	x, err := h.st.ListExecs(t.Context(), store.ExecFilter{WorkspaceID: w.ID})
	if err != nil || len(x) != 1 || x[0].State != store.ExecLost || x[0].FinishedAt.IsZero() {
		t.Fatalf("the exec after the restart: %+v, %v; want lost and finished", x, err)
	}
	if evs := h.events(w.ID, "exec.finished"); len(evs) != 1 || !strings.Contains(evs[0].Detail, "restarted") {
		t.Errorf("exec.finished events after the restart: %+v", evs)
	}
}
