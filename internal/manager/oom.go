package manager

import (
	"context"
	"errors"
	"syscall"
	"time"

	"github.com/agentbox/agentbox/internal/errdefs"
	"github.com/agentbox/agentbox/internal/guest"
	"github.com/agentbox/agentbox/internal/sandbox"
	"github.com/agentbox/agentbox/internal/store"
)

// oomSettle bounds how long a lost exec waits for its environment's OOM
// count to show the kill (gVisor: the OOM killer ends the whole sandbox,
// and the engine records why a moment after the connection drops).
const oomSettle = time.Second

// oomWatch is a sandbox's OOM kill count read before an exec, so that the
// exec's end can be told apart: a SIGKILL (or a lost sandbox) while the
// count went up is an out-of-memory kill.
type oomWatch struct {
	c      sandbox.OOMCounter
	ref    string
	before uint64
	ok     bool
}

// watchOOM reads the count, when sb's backend can count.
func (m *Manager) watchOOM(ctx context.Context, sb store.Sandbox) oomWatch {
	be, err := m.backend(sb.Backend)
	if err != nil {
		return oomWatch{}
	}
	c, ok := be.(sandbox.OOMCounter)
	if !ok || sb.BackendRef == "" {
		return oomWatch{}
	}
	n, err := c.OOMKills(ctx, sb.BackendRef)
	if err != nil {
		m.log.DebugContext(ctx, "reading the OOM kill count", KeySandbox, sb.ID, "err", err)
		return oomWatch{}
	}
	return oomWatch{c: c, ref: sb.BackendRef, before: n, ok: true}
}

// oomKilled says whether the exec that ended with res was killed for the
// memory limit, and records an event when it was.
func (m *Manager) oomKilled(ctx context.Context, w oomWatch, sb store.Sandbox, execID string, res guest.ExecResult) bool {
	if !w.ok || !(res.Signal == int(syscall.SIGKILL) || res.Lost) {
		return false
	}
	deadline := time.Now().Add(oomSettle)
	for {
		n, err := w.c.OOMKills(ctx, w.ref)
		if err == nil && n > w.before {
			m.event(ctx, store.Event{Actor: "daemon", Type: "exec.oom_killed", WorkspaceID: sb.WorkspaceID, SandboxID: sb.ID},
				map[string]any{"exec_id": execID, "lost": res.Lost})
			m.log.InfoContext(ctx, "exec killed for the memory limit", KeySandbox, sb.ID, "exec_id", execID, "sandbox_ended", res.Lost)
			return true
		}
		// Only a lost sandbox may still be dying: a SIGKILL was counted
		// before the guest reported it. One that is gone (removed) will
		// count nothing more.
		if !res.Lost || time.Now().After(deadline) || errors.Is(err, errdefs.ErrNotFound) {
			return false
		}
		time.Sleep(50 * time.Millisecond)
	}
}
