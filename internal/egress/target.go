package egress

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"syscall"
)

// refusal is a denied request: the status to answer with and the reason.
type refusal struct {
	status int
	reason string
}

func refuse(status int, reason string) *refusal { return &refusal{status: status, reason: reason} }

// checkTarget runs the checks that tunnels and forwarded requests share, in
// an order that matters: the host is canonicalised once and that spelling
// is used from then on; the allowlist is consulted before any DNS query, so
// that no query for a name the sandbox may not reach leaves the host; and
// every resolved address is judged before one of them is returned to be
// dialed. It fills d.Host and d.Port as it learns them.
func (p *Proxy) checkTarget(ctx context.Context, sb Sandbox, rawHost, rawPort string, defPort int, d *Decision) ([]netip.Addr, *refusal) {
	host, err := canonicalHost(rawHost)
	if err != nil {
		d.Host = quoteRaw(rawHost)
		if isIPLiteral(err) {
			return nil, refuse(http.StatusForbidden, reasonIPLiteral)
		}
		return nil, refuse(http.StatusBadRequest, reasonBadHost)
	}
	d.Host = host
	port, err := parsePort(rawPort, defPort)
	if err != nil {
		return nil, refuse(http.StatusBadRequest, reasonBadPort)
	}
	d.Port = port
	if sb.Allow == nil || !sb.Allow.Allowed(host, port) {
		return nil, refuse(http.StatusForbidden, reasonNotAllowed)
	}
	addrs, err := p.resolver.LookupNetIP(ctx, "ip", host)
	if err != nil {
		p.log.DebugContext(ctx, "egress lookup failed", logSandbox, sb.ID, logHost, host, logErr, err)
		return nil, refuse(http.StatusBadGateway, reasonDNS)
	}
	if len(addrs) == 0 {
		return nil, refuse(http.StatusBadGateway, reasonNoAddr)
	}
	var excepted []netip.Addr
	checked, reason := checkAddrs(addrs, p.allowAddr, func(a netip.Addr) bool {
		if p.allows(host, a) {
			excepted = append(excepted, a)
			return true
		}
		return false
	})
	if reason != "" {
		return nil, refuse(http.StatusForbidden, reason)
	}
	// Only once the whole answer passed: a refused answer used nothing.
	for _, a := range excepted {
		p.resolveAllowed(ctx, sb.ID, host, a)
	}
	return checked, nil
}

// checkAddrs judges every address, not just the one that will be dialed:
// a name that resolves to one public and one internal address is a name
// whose owner can point it inward, so it is refused whole. allow, when not
// nil, replaces the built-in rules. except, when not nil, is asked about
// an address the built-in rules refuse, and may let it pass (the
// operator's resolve allowances). The addresses are returned unmapped
// and without zones, in the form that is dialed.
func checkAddrs(addrs []netip.Addr, allow, except func(netip.Addr) bool) ([]netip.Addr, string) {
	checked := make([]netip.Addr, 0, len(addrs))
	for _, a := range addrs {
		a = a.WithZone("").Unmap()
		if allow != nil {
			if !allow(a) {
				return nil, forbiddenReason(a, "not allowed")
			}
		} else if why := forbiddenAddr(a); why != "" && (except == nil || !except(a)) {
			return nil, forbiddenReason(a, why)
		}
		checked = append(checked, a)
	}
	return checked, ""
}

// dial connects to the first of addrs that answers, all of them already
// checked. The dialer is handed an address, never a name, so nothing is
// resolved again between the check and the connection; a Control hook
// makes sure of it.
func (p *Proxy) dial(ctx context.Context, addrs []netip.Addr, port int) (net.Conn, netip.AddrPort, error) {
	ctx, cancel := context.WithTimeout(ctx, p.dialTimeout)
	defer cancel()
	var (
		last netip.AddrPort
		errs []error
	)
	for _, a := range addrs {
		ap := netip.AddrPortFrom(a, uint16(port))
		last = ap
		d := net.Dialer{ControlContext: func(_ context.Context, _, address string, _ syscall.RawConn) error {
			got, err := netip.ParseAddrPort(address)
			if err != nil || got.Addr().Unmap() != ap.Addr() || got.Port() != ap.Port() {
				return fmt.Errorf("connecting to %s, not the checked %s", address, ap)
			}
			return nil
		}}
		c, err := d.DialContext(ctx, "tcp", ap.String())
		if err == nil {
			return c, ap, nil
		}
		errs = append(errs, err)
		if ctx.Err() != nil {
			break
		}
	}
	return nil, last, fmt.Errorf("dialing port %d: %w", port, errors.Join(errs...))
}
