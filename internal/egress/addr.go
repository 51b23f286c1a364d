package egress

import "net/netip"

// namedPrefix is a range of addresses a sandbox may not reach, and why.
type namedPrefix struct {
	prefix netip.Prefix
	why    string
}

// forbidden4 lists the IPv4 ranges that are not the public internet. The
// first match names the reason, so single addresses come before the ranges
// that hold them.
var forbidden4 = []namedPrefix{
	{netip.MustParsePrefix("169.254.169.254/32"), "metadata"},
	{netip.MustParsePrefix("168.63.129.16/32"), "metadata"},   // Azure wire server: public-looking, host-local.
	{netip.MustParsePrefix("100.100.100.200/32"), "metadata"}, // Alibaba Cloud.
	{netip.MustParsePrefix("255.255.255.255/32"), "broadcast"},
	{netip.MustParsePrefix("0.0.0.0/8"), "this network"},
	{netip.MustParsePrefix("10.0.0.0/8"), "private"},
	{netip.MustParsePrefix("100.64.0.0/10"), "cgnat"},
	{netip.MustParsePrefix("127.0.0.0/8"), "loopback"},
	{netip.MustParsePrefix("169.254.0.0/16"), "link-local"},
	{netip.MustParsePrefix("172.16.0.0/12"), "private"},
	{netip.MustParsePrefix("192.0.0.0/24"), "ietf protocol assignment"},
	{netip.MustParsePrefix("192.0.2.0/24"), "documentation"},
	{netip.MustParsePrefix("192.88.99.0/24"), "6to4 relay"},
	{netip.MustParsePrefix("192.168.0.0/16"), "private"},
	{netip.MustParsePrefix("198.18.0.0/15"), "benchmarking"},
	{netip.MustParsePrefix("198.51.100.0/24"), "documentation"},
	{netip.MustParsePrefix("203.0.113.0/24"), "documentation"},
	{netip.MustParsePrefix("224.0.0.0/4"), "multicast"},
	{netip.MustParsePrefix("240.0.0.0/4"), "reserved"},
}

// forbidden6 lists the IPv6 ranges inside or beside 2000::/3 that are not
// the public internet. Forms that embed an IPv4 address (IPv4-compatible,
// SIIT, 6to4, Teredo) are refused whole rather than decoded: they are
// deprecated or tunnels whose far end the proxy cannot judge.
var forbidden6 = []namedPrefix{
	{netip.MustParsePrefix("fd00:ec2::254/128"), "metadata"},
	{netip.MustParsePrefix("::/128"), "unspecified"},
	{netip.MustParsePrefix("::1/128"), "loopback"},
	{netip.MustParsePrefix("::/96"), "ipv4-compatible"},
	{netip.MustParsePrefix("::ffff:0:0:0/96"), "ipv4-translated"},
	{netip.MustParsePrefix("64:ff9b:1::/48"), "nat64 local-use"},
	{netip.MustParsePrefix("100::/64"), "discard"},
	{netip.MustParsePrefix("2001::/32"), "teredo"},
	{netip.MustParsePrefix("2001:10::/28"), "orchid"},
	{netip.MustParsePrefix("2001:20::/28"), "orchid"},
	{netip.MustParsePrefix("2001:db8::/32"), "documentation"},
	{netip.MustParsePrefix("2002::/16"), "6to4"},
	{netip.MustParsePrefix("3fff::/20"), "documentation"},
	{netip.MustParsePrefix("fc00::/7"), "private"},
	{netip.MustParsePrefix("fe80::/10"), "link-local"},
	{netip.MustParsePrefix("fec0::/10"), "site-local"},
	{netip.MustParsePrefix("ff00::/8"), "multicast"},
}

var (
	// nat64 is the well-known NAT64 prefix: DNS64 answers with it on
	// IPv6-only networks, so it is allowed when the IPv4 address it embeds
	// would be.
	nat64 = netip.MustParsePrefix("64:ff9b::/96")
	// global6 holds all of today's global unicast; anything outside it is
	// reserved or special.
	global6 = netip.MustParsePrefix("2000::/3")
)

// forbiddenAddr returns why a may not be dialed, or "" when it may. It
// judges the address as the kernel will route it: an IPv4-mapped address
// is its IPv4 address, and a zone changes nothing.
func forbiddenAddr(a netip.Addr) string {
	if !a.IsValid() {
		return "invalid"
	}
	a = a.WithZone("").Unmap()
	if a.Is4() {
		return lookup(forbidden4, a)
	}
	if why := lookup(forbidden6, a); why != "" {
		return why
	}
	if nat64.Contains(a) {
		b := a.As16()
		if why := lookup(forbidden4, netip.AddrFrom4([4]byte(b[12:]))); why != "" {
			return "nat64 " + why
		}
		return ""
	}
	if !global6.Contains(a) {
		return "reserved"
	}
	return ""
}

func lookup(list []namedPrefix, a netip.Addr) string {
	for _, p := range list {
		if p.prefix.Contains(a) {
			return p.why
		}
	}
	return ""
}
