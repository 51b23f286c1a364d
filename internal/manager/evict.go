package manager

import (
	"context"
	"time"

	"github.com/agentbox/agentbox/internal/sandbox"
	"github.com/agentbox/agentbox/internal/store"
)

// Eviction reasons, as recorded in sandbox.evicted events.
const (
	EvictIdle   = "idle"
	EvictMaxAge = "max_age"
	// EvictLifetime: the sandbox's own lifetime (its spec's Lifetime, the
	// policy's limits.sandbox_timeout) is over.
	EvictLifetime = "lifetime"
)

// armLifetime makes the sandbox of lv stop when its lifetime is over, on
// every backend, whatever runs in it (a command still running ends
// killed). The workspace stays; the next exec starts a new sandbox, with
// a lifetime of its own.
func (m *Manager) armLifetime(lv *live, id string) {
	if d := lv.spec.Lifetime; d > 0 {
		lv.expiry = time.AfterFunc(d, func() { m.expire(id) })
	}
}

// expire stops sandbox id at the end of its lifetime.
func (m *Manager) expire(id string) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	sb, err := m.st.GetSandbox(ctx, id)
	if err != nil || sb.State != string(sandbox.StateRunning) {
		return
	}
	l := m.lock("sb:" + sb.WorkspaceID)
	l.Lock()
	defer l.Unlock()
	// Re-read under the lock: a stop or removal may have come first.
	if sb, err = m.st.GetSandbox(ctx, id); err != nil || sb.State != string(sandbox.StateRunning) {
		return
	}
	if err := m.teardown(ctx, &sb, sandbox.StateStopped); err != nil {
		m.log.WarnContext(ctx, "stopping a sandbox at the end of its lifetime", KeySandbox, id, "err", err)
		return
	}
	m.event(ctx, store.Event{Actor: "daemon", Type: "sandbox.evicted", WorkspaceID: sb.WorkspaceID, SandboxID: id},
		map[string]any{"reason": EvictLifetime, "created": sb.CreatedAt})
	m.log.InfoContext(ctx, "sandbox evicted", KeySandbox, id, KeyWorkspace, sb.WorkspaceID, "reason", EvictLifetime)
}

// Evict stops the running sandboxes that have outlived the daemon's limits
// as of now: those idle for Config.IdleTimeout (no API activity and no
// command running) and those older than Config.MaxAge (whatever they do).
// The workspace stays; the next exec on it starts a new sandbox. Each
// eviction is a sandbox.evicted event. It returns the evicted sandboxes.
func (m *Manager) Evict(ctx context.Context, now time.Time) ([]string, error) {
	if m.cfg.IdleTimeout <= 0 && m.cfg.MaxAge <= 0 {
		return nil, nil
	}
	sbs, err := m.st.ListSandboxes(ctx, store.SandboxFilter{})
	if err != nil {
		return nil, err
	}
	var evicted []string
	for _, sb := range sbs {
		if sb.State != string(sandbox.StateRunning) || !m.mine(sb.Node) {
			continue
		}
		if why := m.evictReason(sb, now); why != "" && m.evictOne(ctx, sb, now) {
			evicted = append(evicted, sb.ID)
		}
	}
	return evicted, nil
}

// evictReason says why sb should go now, or returns "".
func (m *Manager) evictReason(sb store.Sandbox, now time.Time) string {
	if m.cfg.MaxAge > 0 && now.Sub(sb.CreatedAt) > m.cfg.MaxAge {
		return EvictMaxAge
	}
	if m.cfg.IdleTimeout <= 0 || now.Sub(sb.LastActivityAt) <= m.cfg.IdleTimeout {
		return ""
	}
	m.liveMu.Lock()
	lv, ok := m.live[sb.ID]
	m.liveMu.Unlock()
	if ok && lv.inflight.Load() > 0 {
		return "" // a command runs: a long test run is not idle
	}
	return EvictIdle
}

// evictOne re-checks sb under its workspace's lock, where commands claim
// their sandbox, and stops it.
func (m *Manager) evictOne(ctx context.Context, sb store.Sandbox, now time.Time) bool {
	l := m.lock("sb:" + sb.WorkspaceID)
	l.Lock()
	defer l.Unlock()
	cur, err := m.st.GetSandbox(ctx, sb.ID)
	if err != nil || cur.State != string(sandbox.StateRunning) {
		return false
	}
	why := m.evictReason(cur, now)
	if why == "" {
		return false
	}
	if err := m.teardown(ctx, &cur, sandbox.StateStopped); err != nil {
		m.log.WarnContext(ctx, "evicting a sandbox", KeySandbox, cur.ID, "err", err)
		return false
	}
	m.event(ctx, store.Event{Actor: "daemon", Type: "sandbox.evicted", WorkspaceID: cur.WorkspaceID, SandboxID: cur.ID},
		map[string]any{"reason": why, "last_activity": cur.LastActivityAt, "created": cur.CreatedAt})
	m.log.InfoContext(ctx, "sandbox evicted", KeySandbox, cur.ID, KeyWorkspace, cur.WorkspaceID, "reason", why)
	return true
}

// RunEviction runs Evict every interval until ctx ends.
func (m *Manager) RunEviction(ctx context.Context, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			if _, err := m.Evict(ctx, now); err != nil && ctx.Err() == nil {
				m.log.WarnContext(ctx, "eviction pass", "err", err)
			}
		}
	}
}
