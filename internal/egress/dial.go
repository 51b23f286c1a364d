package egress

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"time"

	"github.com/agentbox/agentbox/internal/errdefs"
)

// Dial connects the daemon itself to address ("host:port") on behalf of
// who, through exactly the checks a sandbox's request meets: the host is
// canonicalised, IP literals are refused, allow must allow host and port,
// the proxy's resolver answers, every address is judged (with the
// operator's resolve allowances), and only a checked address is dialed.
// It is the way host-side fetches for sandboxes (admitted dependency
// artifacts) go out, so that they are never a direct, unchecked dial. Its
// signature is that of net.Dialer.DialContext, for an http.Transport.
//
// A refusal wraps errdefs.ErrPolicyDenied and names the reason; every
// decision is logged and goes to Options.OnDecision, marked Daemon.
func (p *Proxy) Dial(ctx context.Context, who string, allow Allowlist, network, address string) (net.Conn, error) {
	start := time.Now()
	d := Decision{SandboxID: who, Daemon: true, Method: "DIAL"}
	if network != "tcp" && network != "tcp4" && network != "tcp6" {
		return nil, fmt.Errorf("egress dial %s: network %s: %w", quoteRaw(address), network, errdefs.ErrInvalid)
	}
	rawHost, rawPort, err := net.SplitHostPort(address)
	if err != nil {
		return nil, fmt.Errorf("egress dial %s: %w", quoteRaw(address), errdefs.ErrInvalid)
	}
	sb := Sandbox{ID: who, Allow: allow}
	addrs, ref := p.checkTarget(ctx, sb, rawHost, rawPort, 0, &d)
	if ref == nil {
		var c net.Conn
		c, d.Addr, err = p.dial(ctx, addrs, d.Port)
		if err == nil {
			d.Allowed, d.Reason = true, reasonAllowed
			p.logDial(ctx, d, start)
			return c, nil
		}
		p.log.DebugContext(ctx, "egress dial failed", logSandbox, who, logHost, d.Host, logErr, err)
		ref = refuse(0, reasonDial)
	}
	d.Reason = ref.reason
	p.logDial(ctx, d, start)
	if ref.reason == reasonDial || ref.reason == reasonDNS || ref.reason == reasonNoAddr {
		return nil, fmt.Errorf("egress to %s: %s: %w", net.JoinHostPort(d.Host, strconv.Itoa(d.Port)), ref.reason, errdefs.ErrUnavailable)
	}
	return nil, fmt.Errorf("egress to %s: %s: %w", net.JoinHostPort(d.Host, strconv.Itoa(d.Port)), ref.reason, errdefs.ErrPolicyDenied)
}

// logDial logs a host-side dial's decision as the proxy logs a sandbox's,
// and reports it to OnDecision.
func (p *Proxy) logDial(ctx context.Context, d Decision, start time.Time) {
	d.Duration = time.Since(start)
	level, msg := slog.LevelInfo, "egress dial allowed"
	if !d.Allowed {
		level, msg = slog.LevelWarn, "egress dial denied"
	}
	addr := ""
	if d.Addr.IsValid() {
		addr = d.Addr.String()
	}
	p.log.LogAttrs(ctx, level, msg,
		slog.String(logSandbox, d.SandboxID),
		slog.String(logHost, d.Host),
		slog.Int(logPort, d.Port),
		slog.String(logAddr, addr),
		slog.Bool(logAllowed, d.Allowed),
		slog.String(logReason, d.Reason),
		slog.Duration(logDuration, d.Duration),
	)
	if p.onDecision != nil {
		p.onDecision(d)
	}
}
