package egress

import (
	"context"
	"fmt"
	"log/slog"
	"net/netip"
	"strings"

	"github.com/agentbox/agentbox/internal/errdefs"
)

// ResolveAllowance is an operator's exception to the address check: Host
// may resolve to an address in Prefixes although the address is private,
// loopback, documentation or otherwise reserved. Internal package mirrors
// live on such addresses, and on some networks a public registry's name
// resolves into one (a transparent cache). It comes only from the daemon's
// configuration, never from a sandbox's policy, and every use is logged.
//
// It widens nothing else: another host resolving to the same address is
// still refused, Host resolving outside Prefixes to an internal address is
// still refused, and a sandbox still needs Host in its own allowlist.
type ResolveAllowance struct {
	// Host is the canonical host name (lower case, ASCII, no trailing
	// dot), matched exactly: no wildcard.
	Host string
	// Prefixes are the addresses (as /32 or /128) and ranges Host may
	// resolve to.
	Prefixes []netip.Prefix
}

// Narrowest ranges a resolve allowance may name. A wider range is no
// longer "this mirror's addresses" but a part of the address space.
const (
	minAllowBits4 = 8
	minAllowBits6 = 32
)

// neverAllowed are addresses no allowance may cover, whatever the
// operator writes: the cloud metadata services (credentials of the host),
// the unspecified address (which reaches the host itself), broadcast and
// multicast.
var neverAllowed = []namedPrefix{
	{netip.MustParsePrefix("169.254.169.254/32"), "metadata"},
	{netip.MustParsePrefix("168.63.129.16/32"), "metadata"},
	{netip.MustParsePrefix("100.100.100.200/32"), "metadata"},
	{netip.MustParsePrefix("fd00:ec2::254/128"), "metadata"},
	{netip.MustParsePrefix("0.0.0.0/8"), "this network"},
	{netip.MustParsePrefix("255.255.255.255/32"), "broadcast"},
	{netip.MustParsePrefix("224.0.0.0/4"), "multicast"},
	{netip.MustParsePrefix("::/128"), "unspecified"},
	{netip.MustParsePrefix("ff00::/8"), "multicast"},
}

// ParseResolveAllowance checks one allowance as an operator wrote it: host
// an exact, canonical host name, each address an IP address or a CIDR
// range with no host bits set, none wider than /8 (IPv4) or /32 (IPv6),
// none covering a metadata, unspecified, broadcast or multicast address.
// Errors name the host and the entry.
func ParseResolveAllowance(host string, addresses []string) (ResolveAllowance, error) {
	if strings.ContainsAny(host, "*?") {
		return ResolveAllowance{}, errdefs.Invalid("host %s: a wildcard is not allowed: name one host exactly", quoteRaw(host))
	}
	canon, err := canonicalHost(host)
	if err != nil {
		return ResolveAllowance{}, errdefs.Invalid("host %s: not a host name: %v", quoteRaw(host), err)
	}
	if canon != host {
		return ResolveAllowance{}, errdefs.Invalid("host %s: write it as %s (lower case, no trailing dot)", quoteRaw(host), canon)
	}
	if len(addresses) == 0 {
		return ResolveAllowance{}, errdefs.Invalid("host %s: no addresses", host)
	}
	a := ResolveAllowance{Host: host}
	for i, s := range addresses {
		p, err := parseAllowPrefix(s)
		if err != nil {
			return ResolveAllowance{}, errdefs.Invalid("host %s: addresses[%d] %s: %v", host, i, quoteRaw(s), err)
		}
		a.Prefixes = append(a.Prefixes, p)
	}
	return a, nil
}

func parseAllowPrefix(s string) (netip.Prefix, error) {
	var p netip.Prefix
	if strings.Contains(s, "/") {
		var err error
		if p, err = netip.ParsePrefix(s); err != nil {
			return p, fmt.Errorf("not an address or CIDR range")
		}
		if p != p.Masked() {
			return p, fmt.Errorf("has bits set past the prefix: write %s", p.Masked())
		}
	} else {
		a, err := netip.ParseAddr(s)
		if err != nil {
			return p, fmt.Errorf("not an address or CIDR range")
		}
		if a.Zone() != "" {
			return p, fmt.Errorf("has a zone")
		}
		p = netip.PrefixFrom(a, a.BitLen())
	}
	if p.Addr().Is4In6() {
		return p, fmt.Errorf("is an IPv4-mapped IPv6 form: write the IPv4 address")
	}
	if (p.Addr().Is4() && p.Bits() < minAllowBits4) || (p.Addr().Is6() && p.Bits() < minAllowBits6) {
		return p, fmt.Errorf("covers too much: the widest range allowed is /%d for IPv4 and /%d for IPv6", minAllowBits4, minAllowBits6)
	}
	for _, n := range neverAllowed {
		if p.Overlaps(n.prefix) {
			return p, fmt.Errorf("covers %s (%s), which no allowance may", n.prefix.Addr(), n.why)
		}
	}
	return p, nil
}

// allows reports whether a, a forbidden address host resolved to, is
// covered by an allowance for host.
func (p *Proxy) allows(host string, a netip.Addr) bool {
	for _, al := range p.resolveAllow {
		if al.Host != host {
			continue
		}
		for _, pr := range al.Prefixes {
			if pr.Contains(a) {
				return true
			}
		}
	}
	return false
}

// resolveAllowed logs and counts one use of an allowance: host resolved
// to a, an internal address, and may be dialed there.
func (p *Proxy) resolveAllowed(ctx context.Context, who, host string, a netip.Addr) {
	p.resolveUses.Add(1)
	p.log.LogAttrs(ctx, slog.LevelInfo, "egress resolve allowance used",
		slog.String(logSandbox, who),
		slog.String(logHost, host),
		slog.String(logAddr, a.String()),
	)
	if p.onResolveAllow != nil {
		p.onResolveAllow(host, a)
	}
}

// ResolveAllowanceUses is how many times an allowance let an address
// pass since the proxy was made.
func (p *Proxy) ResolveAllowanceUses() int64 { return p.resolveUses.Load() }
