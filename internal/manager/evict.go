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
)

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
		if sb.State != string(sandbox.StateRunning) {
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
