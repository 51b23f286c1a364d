package manager

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/agentbox/agentbox/internal/errdefs"
	"github.com/agentbox/agentbox/internal/guest"
	"github.com/agentbox/agentbox/internal/store"
)

// egressSocket is the name of a sandbox's egress socket in its run
// directory, which the sandbox sees at guest.DefaultEgressSocketPath.
const egressSocket = "egress.sock"

// Egress is the egress proxy (package egress), which serves the proxy
// connections of every sandbox whose policy lets it reach anything. The
// manager holds only this, so that the lifecycle core stays free of HTTP.
type Egress interface {
	// ServeConn serves one proxy client of sandbox sandboxID on c, which
	// may reach what allow allows, and closes c.
	ServeConn(ctx context.Context, c net.Conn, sandboxID string, allow Allowlist)
}

// Allowlist is egress.Allowlist: the same unnamed interface type.
type Allowlist = interface {
	Allowed(host string, port int) bool
}

// EgressDecision is one decision of the egress proxy, field for field an
// egress.Decision, which converts to it.
type EgressDecision struct {
	SandboxID          string
	Daemon             bool
	Method             string
	Host               string
	Port               int
	Addr               netip.AddrPort
	Allowed            bool
	Reason             string
	BytesUp, BytesDown int64
	Duration           time.Duration
}

// egressServer serves one sandbox's egress socket: every connection on it
// is one proxy client of that sandbox, checked against that sandbox's
// allowlist. Which sandbox a connection belongs to is known by the socket
// it came in on, which only that sandbox can reach: there is no token to
// steal or forge. Only the guest can dial it when it has a user of its
// own; where it has not, a process that dials the socket itself instead of
// the guest's proxy address meets the same checks.
type egressServer struct {
	ln     net.Listener
	cancel context.CancelFunc
	wg     sync.WaitGroup
	// flush waits until the decisions reported so far are recorded.
	flush func()
}

// serveEgress starts the egress socket of sandbox sb in runDir.
func (m *Manager) serveEgress(sb store.Sandbox, runDir string, allow Allowlist) (*egressServer, error) {
	path := filepath.Join(runDir, egressSocket)
	os.Remove(path) // a leftover of a crashed daemon
	ln, err := net.Listen("unix", path)
	if err != nil {
		return nil, fmt.Errorf("sandbox %s: egress socket: %w", sb.ID, err)
	}
	// The guest must be able to connect; nobody else. With a user of its
	// own, commands cannot either: they reach the proxy through the
	// guest's relay only.
	if m.cfg.Egress == nil {
		ln.Close()
		return nil, fmt.Errorf("sandbox %s: its policy allows network, but this daemon has no egress proxy: %w", sb.ID, errdefs.ErrUnavailable)
	}
	err = os.Chmod(path, 0o600)
	if o := m.socketOwner(); err == nil && o != nil {
		err = os.Chown(path, o.UID, o.GID)
	} else if err == nil && m.cfg.UID >= 0 {
		err = os.Chown(path, m.cfg.UID, m.cfg.GID)
	}
	if err != nil {
		ln.Close()
		return nil, fmt.Errorf("sandbox %s: egress socket: %w", sb.ID, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	s := &egressServer{ln: ln, cancel: cancel, flush: m.FlushEgress}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				if ctx.Err() == nil && !errors.Is(err, net.ErrClosed) {
					m.log.Warn("egress socket failed", KeySandbox, sb.ID, "err", err)
				}
				return
			}
			s.wg.Add(1)
			go func() {
				defer s.wg.Done()
				defer c.Close()
				m.cfg.Egress.ServeConn(ctx, c, sb.ID, allow)
			}()
		}
	}()
	return s, nil
}

// close stops accepting, ends every open tunnel, waits for them, and
// then for their decisions to be in the event log.
func (s *egressServer) close() {
	if s == nil {
		return
	}
	s.cancel()
	s.ln.Close()
	s.wg.Wait()
	s.flush()
}

// RecordEgress records one decision of the egress proxy in the event log:
// what a sandbox reached, or tried to, and how much it moved (SECURITY.md
// D30). The daemon hands the proxy's decisions here.
func (m *Manager) RecordEgress(d EgressDecision) {
	typ := "egress.denied"
	if d.Allowed {
		typ = "egress.allowed"
	}
	if d.Daemon {
		// The daemon's own dial, for a host-side fetch: in the event log
		// beside the sandboxes' decisions, as the daemon's, metering none.
		ev := eventRecord(context.Background(), store.Event{Time: time.Now().UTC(), Actor: "daemon", Type: typ},
			map[string]any{"method": d.Method, "for": d.SandboxID, "host": d.Host, "port": d.Port, "addr": d.Addr,
				"reason": d.Reason, "duration_ms": d.Duration.Milliseconds()})
		m.enqueueEgress(store.EgressRecord{Event: ev})
		return
	}
	// From memory while the sandbox lives, which is when decisions come.
	m.liveMu.Lock()
	lv, ok := m.live[d.SandboxID]
	m.liveMu.Unlock()
	wsID, task := "", ""
	if ok {
		wsID, task = lv.workspaceID, lv.task
	} else if sb, err := m.st.GetSandbox(context.Background(), d.SandboxID); err == nil {
		wsID = sb.WorkspaceID
		if w, err := m.st.GetWorkspace(context.Background(), wsID); err == nil {
			task = w.Task
		}
	}
	now := time.Now().UTC()
	ev := eventRecord(context.Background(), store.Event{Time: now, Actor: "sandbox", Type: typ, WorkspaceID: wsID, SandboxID: d.SandboxID},
		map[string]any{"method": d.Method, "host": d.Host, "port": d.Port, "addr": d.Addr, "reason": d.Reason,
			"bytes_up": d.BytesUp, "bytes_down": d.BytesDown, "duration_ms": d.Duration.Milliseconds()})
	rec := store.EgressRecord{Event: ev}
	if d.BytesUp != 0 || d.BytesDown != 0 {
		// What moved is metered with the event, in one commit.
		rec.Usage = &store.EgressUsage{Time: now, SandboxID: d.SandboxID, WorkspaceID: wsID, Task: task, BytesUp: d.BytesUp, BytesDown: d.BytesDown}
	}
	// Committed by the egress log's writer, off the proxy's path.
	m.enqueueEgress(rec)
}

// proxyEnv is what a command of a sandbox with egress finds in its
// environment, unless its request sets the same names: every common
// client honours one of these spellings.
func proxyEnv() []string {
	u := "http://" + guest.DefaultProxyAddr
	noProxy := "localhost,127.0.0.1,::1"
	return []string{"HTTP_PROXY=" + u, "HTTPS_PROXY=" + u, "http_proxy=" + u, "https_proxy=" + u,
		"NO_PROXY=" + noProxy, "no_proxy=" + noProxy}
}
