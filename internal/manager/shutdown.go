package manager

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sync"

	"github.com/agentbox/agentbox/internal/sandbox"
	"github.com/agentbox/agentbox/internal/store"
)

// shutdownParallel is how many sandboxes Shutdown stops at once.
const shutdownParallel = 8

// Shutdown stops every sandbox this daemon runs, as a stopping daemon
// must: their guests are connected to this process and are cut off when
// it exits, so their environments are of no further use. Each is torn
// down (environment, run dir, egress socket) and recorded stopped with a
// sandbox.stopped event saying why; a command still running in one ends,
// killed, and its record says so. The workspaces stay: the next exec on
// one starts a new sandbox. Sandboxes left when ctx ends keep their
// running rows, which the next start marks lost.
func (m *Manager) Shutdown(ctx context.Context) error {
	m.liveMu.Lock()
	ids := slices.Sorted(maps.Keys(m.live))
	m.liveMu.Unlock()
	sem := make(chan struct{}, shutdownParallel)
	var wg sync.WaitGroup
	var mu sync.Mutex
	failed := 0
	for _, id := range ids {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			if err := m.stopForShutdown(ctx, id); err != nil {
				m.log.WarnContext(ctx, "stopping a sandbox at shutdown", KeySandbox, id, "err", err)
				mu.Lock()
				failed++
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	// The background processes of the stopped sandboxes ended with them:
	// their records say so before the daemon goes.
	recorded := make(chan struct{})
	go func() {
		m.procs.supervisors.Wait()
		close(recorded)
	}()
	select {
	case <-recorded:
	case <-ctx.Done():
	}
	// Every stopped sandbox's decisions are committed; so are those of
	// any that failed to stop.
	m.FlushEgress()
	if failed > 0 {
		return fmt.Errorf("stopping sandboxes at shutdown: %d of %d not stopped (the next start marks them lost)", failed, len(ids))
	}
	return nil
}

func (m *Manager) stopForShutdown(ctx context.Context, id string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	sb, err := m.st.GetSandbox(ctx, id)
	if err != nil {
		m.dropLive(id)
		return err
	}
	l := m.lock("sb:" + sb.WorkspaceID)
	l.Lock()
	defer l.Unlock()
	sb, err = m.st.GetSandbox(ctx, id)
	if err != nil || sb.State != string(sandbox.StateRunning) {
		// Stopped, lost or removed meanwhile: nothing of it is live.
		m.dropLive(id)
		return nil
	}
	if err := m.teardown(ctx, &sb, sandbox.StateStopped); err != nil {
		return err
	}
	m.event(ctx, store.Event{Actor: "daemon", Type: "sandbox.stopped", WorkspaceID: sb.WorkspaceID, SandboxID: sb.ID},
		map[string]any{"reason": "daemon stopping"})
	return nil
}
