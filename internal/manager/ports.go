package manager

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/agentbox/agentbox/internal/apitypes"
	"github.com/agentbox/agentbox/internal/errdefs"
	"github.com/agentbox/agentbox/internal/guest"
	"github.com/agentbox/agentbox/internal/store"
)

// Ports without a network. A server listening inside a sandbox is reached
// from the host through the daemon: publishing a port opens a listener on
// the host's loopback (127.0.0.1, an ephemeral port) and every connection
// to it becomes a FrameDial stream on the guest's control connection, on
// which the guest dials 127.0.0.1:PORT inside the sandbox and carries the
// bytes (guest.Conn.OpenPort). The sandbox gains no route, interface or
// socket toward the host: only the daemon opens connections, and only to
// the sandbox's own loopback. A port that is not published is reachable
// from nowhere outside its sandbox (SECURITY.md D29).
//
// The host listener takes any local user's connection, as a developer's
// own dev server would; the same port is also reachable through the API
// (/v1/sandboxes/{id}/ports/{port}/...), behind its socket permissions and
// token. A published port lives as long as its sandbox: a replaced
// sandbox starts with none.
const (
	// maxPortsPublished bounds the published ports of one sandbox,
	// maxPortConns the connections relayed at once through one port, and
	// maxDialedConns those the API forwards at once to one sandbox: in
	// all well below the streams one guest connection carries (1024), so
	// that connections never keep commands from starting.
	maxPortsPublished = 16
	maxPortConns      = 32
	maxDialedConns    = 64
)

// published is one published port of a live sandbox.
type published struct {
	sandboxID, workspaceID string
	port                   uint16
	ln                     net.Listener
	created                time.Time
	conns, active          atomic.Int64
	// ctx ends the relays when the port is unpublished or its sandbox
	// goes.
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// portSet is the published ports of one live sandbox.
type portSet struct {
	mu     sync.Mutex
	ports  map[uint16]*published
	closed bool
	// dialed counts the connections DialPort holds open.
	dialed atomic.Int64
}

func (s *portSet) closeAll() {
	s.mu.Lock()
	ps := s.ports
	s.ports, s.closed = nil, true
	s.mu.Unlock()
	for _, p := range ps {
		p.close()
	}
}

func (p *published) close() {
	p.ln.Close()
	p.cancel()
}

func (p *published) view() apitypes.Port {
	addr := p.ln.Addr().String()
	return apitypes.Port{
		WorkspaceID: p.workspaceID, SandboxID: p.sandboxID, Port: int(p.port),
		URL: "http://" + addr + "/", HostAddr: addr,
		ProxyPath: fmt.Sprintf("/v1/sandboxes/%s/ports/%d/", p.sandboxID, p.port),
		CreatedAt: p.created, Connections: p.conns.Load(), Active: p.active.Load(),
	}
}

// checkPort checks a port number as a caller gives it.
func checkPort(port int) (uint16, error) {
	if port < 1 || port > 65535 {
		return 0, errdefs.Invalid("port %d is not between 1 and 65535", port)
	}
	return uint16(port), nil
}

// liveSandbox returns the running sandbox of target (a workspace or a
// sandbox ID) and the daemon's side of it. Ports need one that runs:
// a new sandbox would have no server listening.
func (m *Manager) liveSandbox(ctx context.Context, target string) (store.Sandbox, *live, error) {
	wsID, err := m.ExecTarget(ctx, target)
	if err != nil {
		return store.Sandbox{}, nil, err
	}
	sb, ok := m.current(ctx, wsID)
	if ok && (target == wsID || target == sb.ID) {
		m.liveMu.Lock()
		lv := m.live[sb.ID]
		m.liveMu.Unlock()
		if lv != nil {
			return sb, lv, nil
		}
	}
	if target != wsID {
		return store.Sandbox{}, nil, fmt.Errorf("sandbox %s is not running: %w", target, errdefs.ErrConflict)
	}
	return store.Sandbox{}, nil, fmt.Errorf("workspace %s has no running sandbox: start the server in one first (exec --detach): %w", wsID, errdefs.ErrConflict)
}

// PublishPort publishes req.Port of target's running sandbox on the
// host's loopback and returns its URL. Publishing a port again returns
// the same listener.
func (m *Manager) PublishPort(ctx context.Context, target string, req apitypes.PortRequest) (apitypes.Port, error) {
	port, err := checkPort(req.Port)
	if err != nil {
		return apitypes.Port{}, err
	}
	sb, lv, err := m.liveSandbox(ctx, target)
	if err != nil {
		return apitypes.Port{}, err
	}
	if lv.spec.Egress() {
		if ap, err := netip.ParseAddrPort(guest.DefaultProxyAddr); err == nil && ap.Port() == port {
			return apitypes.Port{}, errdefs.Invalid("port %d is the guest's own egress proxy, not a server of the sandbox's", port)
		}
	}
	s := &lv.ports
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return apitypes.Port{}, fmt.Errorf("sandbox %s is stopping: %w", sb.ID, errdefs.ErrConflict)
	}
	if p := s.ports[port]; p != nil {
		return p.view(), nil
	}
	if len(s.ports) >= maxPortsPublished {
		return apitypes.Port{}, fmt.Errorf("sandbox %s already publishes %d ports, the most it may: %w", sb.ID, len(s.ports), errdefs.ErrConflict)
	}
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		return apitypes.Port{}, fmt.Errorf("publishing port %d of sandbox %s: %w", port, sb.ID, err)
	}
	pctx, cancel := context.WithCancel(context.Background())
	p := &published{sandboxID: sb.ID, workspaceID: sb.WorkspaceID, port: port, ln: ln, created: time.Now().UTC(), ctx: pctx, cancel: cancel}
	if s.ports == nil {
		s.ports = map[uint16]*published{}
	}
	s.ports[port] = p
	go m.servePort(p, lv)
	v := p.view()
	m.event(ctx, store.Event{Type: "port.published", WorkspaceID: sb.WorkspaceID, SandboxID: sb.ID},
		map[string]any{"port": int(port), "host_addr": v.HostAddr})
	m.log.InfoContext(ctx, "port published", KeySandbox, sb.ID, "port", port, "host_addr", v.HostAddr)
	return v, nil
}

// servePort accepts the connections of a published port until it closes.
func (m *Manager) servePort(p *published, lv *live) {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		if p.active.Load() >= maxPortConns {
			c.Close()
			continue
		}
		p.conns.Add(1)
		p.active.Add(1)
		go func() {
			defer p.active.Add(-1)
			m.relay(p.ctx, lv, p.port, c)
		}()
	}
}

// relay carries one host connection c to port of the sandbox of lv until
// either side ends it or ctx ends. A port nobody listens on closes c.
// While a connection is open the sandbox counts as busy, as while a
// command runs.
func (m *Manager) relay(ctx context.Context, lv *live, port uint16, c net.Conn) {
	defer c.Close()
	lv.inflight.Add(1)
	defer lv.done()
	gp, err := lv.conn.OpenPort(ctx, port, c)
	if err != nil {
		m.log.Debug("relaying a connection to a sandbox port", "port", port, "err", err)
		return
	}
	stop := context.AfterFunc(ctx, func() { c.Close() })
	defer stop()
	gp.Wait(ctx)
}

// ListPorts lists the published ports of target's running sandbox.
func (m *Manager) ListPorts(ctx context.Context, target string) ([]apitypes.Port, error) {
	_, lv, err := m.liveSandbox(ctx, target)
	if err != nil {
		return nil, err
	}
	s := &lv.ports
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]apitypes.Port, 0, len(s.ports))
	for _, port := range slices.Sorted(maps.Keys(s.ports)) {
		out = append(out, s.ports[port].view())
	}
	return out, nil
}

// UnpublishPort closes a published port and the connections through it.
func (m *Manager) UnpublishPort(ctx context.Context, target string, port int) error {
	pn, err := checkPort(port)
	if err != nil {
		return err
	}
	sb, lv, err := m.liveSandbox(ctx, target)
	if err != nil {
		return err
	}
	s := &lv.ports
	s.mu.Lock()
	p := s.ports[pn]
	delete(s.ports, pn)
	s.mu.Unlock()
	if p == nil {
		return fmt.Errorf("port %d of sandbox %s is not published: %w", port, sb.ID, errdefs.ErrNotFound)
	}
	p.close()
	m.event(ctx, store.Event{Type: "port.unpublished", WorkspaceID: sb.WorkspaceID, SandboxID: sb.ID}, map[string]any{"port": port})
	return nil
}

// DialPort connects to port on the loopback of running sandbox id through
// its guest, as a published port's listener does, for a caller that
// carries the bytes itself (the API's port forwarding). The port need not
// be published: the caller holds the API's authority. Closing the
// connection ends the relay.
func (m *Manager) DialPort(ctx context.Context, id string, port int) (net.Conn, error) {
	pn, err := checkPort(port)
	if err != nil {
		return nil, err
	}
	_, lv, err := m.liveSandbox(ctx, id)
	if err != nil {
		return nil, err
	}
	if lv.spec.Egress() {
		if ap, err := netip.ParseAddrPort(guest.DefaultProxyAddr); err == nil && ap.Port() == pn {
			return nil, errdefs.Invalid("port %d is the guest's own egress proxy, not a server of the sandbox's", port)
		}
	}
	if lv.ports.dialed.Add(1) > maxDialedConns {
		lv.ports.dialed.Add(-1)
		return nil, fmt.Errorf("sandbox %s already has %d forwarded connections open: %w", id, maxDialedConns, errdefs.ErrUnavailable)
	}
	ours, theirs := net.Pipe()
	lv.inflight.Add(1)
	gp, err := lv.conn.OpenPort(ctx, pn, theirs)
	if err != nil {
		lv.ports.dialed.Add(-1)
		lv.done()
		ours.Close()
		theirs.Close()
		var se *guest.StartError
		if errors.As(err, &se) {
			return nil, fmt.Errorf("port %d of sandbox %s: %s: %w", port, id, se.Reason, errdefs.ErrUnavailable)
		}
		return nil, fmt.Errorf("port %d of sandbox %s: %w", port, id, err)
	}
	go func() {
		defer lv.done()
		defer lv.ports.dialed.Add(-1)
		gp.Wait(context.Background())
		theirs.Close()
	}()
	return &dialedPort{Conn: ours, gp: gp}, nil
}

// dialedPort is a connection DialPort made. Closing it ends the input of
// the sandbox's server after what was written (as a TCP close would) and
// kills the relay if the server has not closed its side within
// dialedLinger (a server that keeps connections alive).
type dialedPort struct {
	net.Conn
	gp *guest.Process
}

// dialedLinger is how long a closed forwarded connection waits for the
// sandbox's server to close its side.
const dialedLinger = 5 * time.Second

func (d *dialedPort) Close() error {
	err := d.Conn.Close()
	go func() {
		t := time.NewTimer(dialedLinger)
		defer t.Stop()
		select {
		case <-d.gp.Done():
		case <-t.C:
			d.gp.Kill()
		}
	}()
	return err
}
