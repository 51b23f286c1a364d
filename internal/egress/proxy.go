// Package egress is the daemon's egress proxy: the only way out of a
// sandbox.
//
// A sandbox has no network. The guest offers an HTTP proxy on loopback
// inside it and passes each connection to the daemon, which hands it to
// Proxy.ServeConn: the client's socket itself where the runtime can pass
// descriptors over the egress socket, else a relay of its bytes (see
// guest.EgressHandoff). For every request the proxy canonicalises the target host
// once, refuses IP literals, checks the sandbox's allowlist, resolves the
// name with its own resolver, refuses the request if any address is
// internal (loopback, private, link-local, metadata, ...), dials exactly one
// of the addresses it checked, and reports the decision. A CONNECT tunnel
// must further open with a TLS ClientHello whose server name is the allowed
// host; a plain HTTP request is forwarded with hop-by-hop and Proxy-* headers
// removed.
//
// What the proxy cannot prevent, it makes visible: every decision, with the
// bytes carried each way, goes to Options.OnDecision and to the log.
package egress

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"
	"strconv"
	"sync/atomic"
	"time"
)

// Defaults of the Options timeouts.
const (
	DefaultDialTimeout   = 10 * time.Second
	DefaultHeaderTimeout = 30 * time.Second
	DefaultIdleTimeout   = 2 * time.Minute
)

// maxHeaderBytes caps a request line plus its headers, and the headers of
// an upstream response, so that a sandbox cannot make the daemon buffer
// without bound.
const maxHeaderBytes = 64 << 10

// Log keys.
const (
	logSandbox   = "sandbox_id"
	logMethod    = "method"
	logHost      = "host"
	logPort      = "port"
	logAddr      = "addr"
	logAllowed   = "allowed"
	logReason    = "reason"
	logBytesUp   = "bytes_up"
	logBytesDown = "bytes_down"
	logDuration  = "duration"
	logErr       = "error"
	logSNI       = "sni"
)

// Allowlist decides which destinations a sandbox may reach: Allowed
// reports whether the sandbox may reach host:port, host always canonical
// (lowercase ASCII, IDNA A-labels, no trailing dot, never an IP literal).
// It is an alias of an unnamed interface type so that packages which must
// not import this one (the manager) can name the very same type.
type Allowlist = interface {
	Allowed(host string, port int) bool
}

// Interceptor is what an Allowlist may also be: it takes over the tunnels
// it Intercepts, after the proxy has checked the target, dialed the
// checked address and matched the ClientHello's server name. It ends the
// sandbox's TLS with a certificate the sandbox trusts, swaps secrets into
// the requests (package egress/mitm) and speaks TLS to up. client first
// replays the ClientHello the proxy read.
type Interceptor interface {
	Intercepts(host string, port int) bool
	Intercept(ctx context.Context, client net.Conn, host string, port int, up net.Conn, upstreamTLS *tls.Config) (bytesUp, bytesDown int64, err error)
}

// Resolver looks up the addresses of a host. *net.Resolver is one.
type Resolver interface {
	// LookupNetIP returns the addresses of host; network is "ip".
	LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error)
}

// Sandbox is whose connection ServeConn serves and where it may go.
type Sandbox struct {
	// ID names the sandbox in decisions and logs.
	ID string
	// Allow is the sandbox's allowlist; nil allows nothing.
	Allow Allowlist
}

// Decision records what the proxy did with one request or tunnel. It is
// reported once, when the request or tunnel ends.
type Decision struct {
	// SandboxID is the Sandbox.ID of the connection; for a dial of the
	// daemon's own (Daemon), whom it dialed for (Proxy.Dial's who).
	SandboxID string
	// Daemon says the daemon itself dialed (Proxy.Dial): a host-side fetch
	// on a sandbox's behalf, not a sandbox's request.
	Daemon bool
	// Method is "CONNECT" or the HTTP method of a forwarded request; empty
	// when the request could not be parsed.
	Method string
	// Host is the canonical target host, or, when the target could not be
	// canonicalised (an IP literal, a malformed name), the raw target
	// quoted so that it is safe to print.
	Host string
	// Port is the target port; 0 when it was missing or invalid.
	Port int
	// Addr is the address that was dialed, if any.
	Addr netip.AddrPort
	// Allowed reports whether the request or tunnel was carried to the
	// upstream.
	Allowed bool
	// Reason is "allowed", or why the request was refused or cut.
	Reason string
	// BytesUp and BytesDown count the bytes carried to and from the
	// upstream: for a tunnel every byte after the CONNECT exchange, for a
	// forwarded request the request and response bodies.
	BytesUp, BytesDown int64
	// Duration runs from the first byte of the request to the end of the
	// request or tunnel.
	Duration time.Duration
}

// Options configure a Proxy. The zero Options is the production setting.
type Options struct {
	// Logger receives one record per decision; nil discards them.
	Logger *slog.Logger
	// OnDecision, when set, is called with every decision. It is called
	// from the goroutines of ServeConn, concurrently, and should not block.
	OnDecision func(Decision)

	// ResolveAllow are the operator's resolve allowances (the daemon's
	// configuration, egress.resolve_allow): hosts that may resolve to
	// the internal addresses listed with them.
	ResolveAllow []ResolveAllowance
	// OnResolveAllow, when set, is called each time an allowance lets an
	// address pass, after it was logged; the daemon counts the uses.
	OnResolveAllow func(host string, addr netip.Addr)

	// Resolver resolves target hosts; nil means net.DefaultResolver.
	//
	// Test-only: no API or configuration file sets it. Tests use it to map
	// names under .test to loopback upstreams.
	Resolver Resolver
	// AllowAddr, when set, decides instead of the built-in rules which
	// resolved addresses may be dialed; nil refuses loopback, private,
	// link-local, metadata and the other internal ranges.
	//
	// Test-only: no API or configuration file sets it, because setting it
	// lets a sandbox reach the host. Tests use it to allow 127.0.0.1.
	AllowAddr func(netip.Addr) bool
	// UpstreamTLS configures the TLS that an Interceptor speaks to the
	// upstream; nil verifies against the system's roots.
	//
	// Test-only: no API or configuration file sets it. Tests give the
	// root of their loopback upstreams' certificates.
	UpstreamTLS *tls.Config

	// DialTimeout bounds dialing an upstream; 0 means DefaultDialTimeout.
	DialTimeout time.Duration
	// HeaderTimeout bounds reading a request header and a TLS
	// ClientHello; 0 means DefaultHeaderTimeout.
	HeaderTimeout time.Duration
	// IdleTimeout ends a connection with no request, and a tunnel with no
	// bytes either way, for that long; 0 means DefaultIdleTimeout.
	IdleTimeout time.Duration
}

// Proxy is the egress proxy. It holds no per-connection state and is safe
// for concurrent use.
type Proxy struct {
	log        *slog.Logger
	onDecision func(Decision)
	resolver   Resolver
	allowAddr  func(netip.Addr) bool
	upTLS      *tls.Config

	resolveAllow   []ResolveAllowance
	onResolveAllow func(host string, addr netip.Addr)
	resolveUses    atomic.Int64

	dialTimeout   time.Duration
	headerTimeout time.Duration
	idleTimeout   time.Duration
}

// New returns a Proxy configured by opts.
func New(opts Options) *Proxy {
	p := &Proxy{
		log:        opts.Logger,
		onDecision: opts.OnDecision,
		resolver:   opts.Resolver,
		allowAddr:  opts.AllowAddr,
		upTLS:      opts.UpstreamTLS,

		resolveAllow:   opts.ResolveAllow,
		onResolveAllow: opts.OnResolveAllow,
		dialTimeout:    opts.DialTimeout,
		headerTimeout:  opts.HeaderTimeout,
		idleTimeout:    opts.IdleTimeout,
	}
	if p.log == nil {
		p.log = slog.New(slog.DiscardHandler)
	}
	if p.resolver == nil {
		p.resolver = net.DefaultResolver
	}
	if p.dialTimeout <= 0 {
		p.dialTimeout = DefaultDialTimeout
	}
	if p.headerTimeout <= 0 {
		p.headerTimeout = DefaultHeaderTimeout
	}
	if p.idleTimeout <= 0 {
		p.idleTimeout = DefaultIdleTimeout
	}
	return p
}

// ServeConn speaks the HTTP proxy protocol on c for the sandbox sandboxID,
// which may reach what allow allows (nil: nothing), until c is done: the
// client closes it, it idles out, a request is refused in a way that
// leaves the stream unusable, a tunnel ends, or ctx is done. ServeConn
// closes c before it returns.
//
// A unix connection is a connection on a sandbox's egress socket: it opens
// as guest.EgressHandoff says, and may hand over the client's own socket,
// which is then served instead.
func (p *Proxy) ServeConn(ctx context.Context, c net.Conn, sandboxID string, allow Allowlist) {
	if uc, ok := c.(*net.UnixConn); ok {
		stop := context.AfterFunc(ctx, func() { uc.Close() })
		conn, ok := p.openEgress(uc)
		stop()
		if !ok {
			return
		}
		c = conn
	}
	p.serve(ctx, c, Sandbox{ID: sandboxID, Allow: allow})
}

func (p *Proxy) serve(ctx context.Context, c net.Conn, sb Sandbox) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer c.Close()
	// Closing c is the only way to interrupt a read or write blocked on it.
	stop := context.AfterFunc(ctx, func() { c.Close() })
	defer stop()

	lim := &headerLimiter{r: c, n: -1}
	br := bufio.NewReader(lim)
	for {
		// Wait for the first byte under the idle timeout, so that the
		// header timeout runs only once a request has begun.
		_ = c.SetReadDeadline(time.Now().Add(p.idleTimeout))
		if _, err := br.Peek(1); err != nil {
			return
		}
		start := time.Now()
		_ = c.SetReadDeadline(start.Add(p.headerTimeout))
		lim.set(maxHeaderBytes)
		req, err := http.ReadRequest(br)
		exceeded := lim.exceeded
		lim.set(-1)
		_ = c.SetReadDeadline(time.Time{})
		if err != nil {
			d := Decision{SandboxID: sb.ID, Reason: reasonMalformed}
			status := http.StatusBadRequest
			switch {
			case exceeded:
				d.Reason, status = reasonHeaderTooLarge, http.StatusRequestHeaderFieldsTooLarge
			case errors.Is(err, os.ErrDeadlineExceeded):
				d.Reason, status = reasonHeaderTimeout, http.StatusRequestTimeout
			case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, net.ErrClosed):
				// The client went away mid-header: nobody to answer.
				d.Reason, status = reasonIncomplete, 0
			}
			if status != 0 {
				p.writeRefusal(c, status, d.Reason, false, true)
			}
			d.Duration = time.Since(start)
			p.decide(ctx, d)
			return
		}
		if req.Method == http.MethodConnect {
			p.tunnel(ctx, c, br, req, sb, start)
			return
		}
		if !p.forward(ctx, c, req, sb, start) {
			return
		}
	}
}

// decide reports d to the log and to OnDecision.
func (p *Proxy) decide(ctx context.Context, d Decision) {
	addr := ""
	if d.Addr.IsValid() {
		addr = d.Addr.String()
	}
	level, msg := slog.LevelInfo, "egress allowed"
	if !d.Allowed {
		level, msg = slog.LevelWarn, "egress denied"
	}
	p.log.LogAttrs(ctx, level, msg,
		slog.String(logSandbox, d.SandboxID),
		slog.String(logMethod, d.Method),
		slog.String(logHost, d.Host),
		slog.Int(logPort, d.Port),
		slog.String(logAddr, addr),
		slog.Bool(logAllowed, d.Allowed),
		slog.String(logReason, d.Reason),
		slog.Int64(logBytesUp, d.BytesUp),
		slog.Int64(logBytesDown, d.BytesDown),
		slog.Duration(logDuration, d.Duration),
	)
	if p.onDecision != nil {
		p.onDecision(d)
	}
}

// writeRefusal answers a refused request with status and a one-line
// plain-text reason. Errors are ignored: the client may already be gone,
// and the decision is reported either way.
func (p *Proxy) writeRefusal(c net.Conn, status int, reason string, head, closing bool) {
	body := reason + "\n"
	if head {
		body = ""
	}
	msg := fmt.Sprintf("HTTP/1.1 %d %s\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: %d\r\nX-Content-Type-Options: nosniff\r\n",
		status, http.StatusText(status), len(reason)+1)
	if closing {
		msg += "Connection: close\r\n"
	}
	msg += "\r\n" + body
	// A client that does not read must not hold the goroutine.
	_ = c.SetWriteDeadline(time.Now().Add(p.headerTimeout))
	_, _ = io.WriteString(c, msg)
	_ = c.SetWriteDeadline(time.Time{})
}

// headerLimiter caps the bytes read from a connection while a request
// header is parsed; http.ReadRequest has no limit of its own.
type headerLimiter struct {
	r        io.Reader
	n        int64 // bytes left; negative means no limit
	exceeded bool
}

// set starts a new limit of n bytes, or lifts it when n is negative.
func (l *headerLimiter) set(n int64) {
	l.n = n
	l.exceeded = false
}

func (l *headerLimiter) Read(b []byte) (int, error) {
	if l.n < 0 {
		return l.r.Read(b)
	}
	if l.n == 0 {
		l.exceeded = true
		return 0, errHeaderTooLarge
	}
	if int64(len(b)) > l.n {
		b = b[:l.n]
	}
	n, err := l.r.Read(b)
	l.n -= int64(n)
	return n, err
}

var errHeaderTooLarge = errors.New("request header too large")

// Reasons, as they appear in Decision.Reason and refusal bodies.
const (
	reasonAllowed        = "allowed"
	reasonMalformed      = "malformed request"
	reasonHeaderTooLarge = "request header too large"
	reasonHeaderTimeout  = "request header timeout"
	reasonIncomplete     = "incomplete request"
	reasonMethod         = "method not allowed"
	reasonOriginForm     = "origin-form request: use an absolute http:// URL or CONNECT"
	reasonScheme         = "unsupported scheme"
	reasonUpgrade        = "protocol upgrade not allowed"
	reasonVersion        = "unsupported http version"
	reasonUserinfo       = "userinfo in target"
	reasonBadTarget      = "invalid target"
	reasonIPLiteral      = "ip literal target"
	reasonBadHost        = "invalid host"
	reasonBadPort        = "invalid port"
	reasonNotAllowed     = "not in allowlist"
	reasonDNS            = "dns lookup failed"
	reasonNoAddr         = "no address"
	reasonDial           = "dial failed"
	reasonUpstream       = "upstream request failed"
	reasonClientClosed   = "client closed"
)

// forbiddenReason is the reason for refusing a resolved address.
func forbiddenReason(a netip.Addr, why string) string {
	return "forbidden address " + a.String() + " (" + why + ")"
}

// displayHost names a host for the log: canonical when it can be, quoted
// otherwise.
func displayHost(raw string) string {
	if h, err := canonicalHost(raw); err == nil {
		return h
	}
	return quoteRaw(raw)
}

// quoteRaw makes an unvalidated target safe to log and compare: bounded,
// quoted, ASCII.
func quoteRaw(s string) string {
	const maxRaw = 256
	if len(s) > maxRaw {
		s = s[:maxRaw]
	}
	return strconv.QuoteToASCII(s)
}
