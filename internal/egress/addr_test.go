package egress

import (
	"net/netip"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestForbiddenAddr(t *testing.T) {
	tests := []struct {
		addr string
		want string
	}{
		// The public internet.
		{"8.8.8.8", ""},
		{"1.1.1.1", ""},
		{"2606:4700:4700::1111", ""},
		{"::ffff:8.8.8.8", ""},
		{"64:ff9b::808:808", ""},

		{"127.0.0.1", "loopback"},
		{"127.255.255.254", "loopback"},
		{"::1", "loopback"},
		{"0.0.0.0", "this network"},
		{"0.1.2.3", "this network"},
		{"::", "unspecified"},
		{"10.0.0.1", "private"},
		{"172.16.0.1", "private"},
		{"172.31.255.255", "private"},
		{"192.168.1.1", "private"},
		{"fc00::1", "private"},
		{"fd12:3456::1", "private"},
		{"169.254.169.254", "metadata"},
		{"fd00:ec2::254", "metadata"},
		{"168.63.129.16", "metadata"},
		{"100.100.100.200", "metadata"},
		{"169.254.1.1", "link-local"},
		{"fe80::1", "link-local"},
		{"fe80::1%eth0", "link-local"},
		{"100.64.0.1", "cgnat"},
		{"100.127.255.255", "cgnat"},
		{"192.0.0.8", "ietf protocol assignment"},
		{"198.18.0.1", "benchmarking"},
		{"198.19.255.255", "benchmarking"},
		{"224.0.0.1", "multicast"},
		{"ff02::1", "multicast"},
		{"240.0.0.1", "reserved"},
		{"255.255.255.255", "broadcast"},
		{"192.0.2.1", "documentation"},
		{"2001:db8::1", "documentation"},
		{"fec0::1", "site-local"},

		// IPv4 inside IPv6.
		{"::ffff:127.0.0.1", "loopback"},
		{"::ffff:169.254.169.254", "metadata"},
		{"::ffff:10.0.0.1", "private"},
		{"::127.0.0.1", "ipv4-compatible"},
		{"::169.254.169.254", "ipv4-compatible"},
		{"::8.8.8.8", "ipv4-compatible"},
		{"::ffff:0:127.0.0.1", "ipv4-translated"},
		{"64:ff9b::127.0.0.1", "nat64 loopback"},
		{"64:ff9b::169.254.169.254", "nat64 metadata"},
		{"64:ff9b::10.0.0.1", "nat64 private"},
		{"64:ff9b:1::a00:1", "nat64 local-use"},
		{"2002:7f00:1::1", "6to4"},
		{"2002:808:808::1", "6to4"},
		{"2001:0:4136:e378:8000:63bf:3fff:fdd2", "teredo"},
		{"100::1", "discard"},
		{"4000::1", "reserved"},
		{"::2", "ipv4-compatible"},
	}
	for _, tt := range tests {
		t.Run(tt.addr, func(t *testing.T) {
			if got := forbiddenAddr(netip.MustParseAddr(tt.addr)); got != tt.want {
				t.Errorf("forbiddenAddr(%s) = %q, want %q", tt.addr, got, tt.want)
			}
		})
	}
	if got := forbiddenAddr(netip.Addr{}); got == "" {
		t.Error("forbiddenAddr(zero Addr) allows it")
	}
}

func TestCheckAddrs(t *testing.T) {
	addrs := func(ss ...string) []netip.Addr {
		var out []netip.Addr
		for _, s := range ss {
			out = append(out, netip.MustParseAddr(s))
		}
		return out
	}
	loopback := func(a netip.Addr) bool { return a == netip.MustParseAddr("127.0.0.1") }
	tests := []struct {
		name       string
		in         []netip.Addr
		allow      func(netip.Addr) bool
		want       []netip.Addr
		wantReason string
	}{
		{name: "public", in: addrs("8.8.8.8", "2606:4700:4700::1111"), want: addrs("8.8.8.8", "2606:4700:4700::1111")},
		{name: "mapped are unmapped", in: addrs("::ffff:8.8.8.8"), want: addrs("8.8.8.8")},
		{name: "one private among public", in: addrs("8.8.8.8", "10.0.0.1"), wantReason: "forbidden address 10.0.0.1 (private)"},
		{name: "private first", in: addrs("10.0.0.1", "8.8.8.8"), wantReason: "forbidden address 10.0.0.1 (private)"},
		{name: "mapped loopback", in: addrs("8.8.8.8", "::ffff:127.0.0.1"), wantReason: "forbidden address 127.0.0.1 (loopback)"},
		{name: "nat64 metadata", in: addrs("64:ff9b::a9fe:a9fe"), wantReason: "forbidden address 64:ff9b::a9fe:a9fe (nat64 metadata)"},
		{name: "allow replaces the rules", in: addrs("127.0.0.1"), allow: loopback, want: addrs("127.0.0.1")},
		{name: "allow refuses public", in: addrs("127.0.0.1", "8.8.8.8"), allow: loopback, wantReason: "forbidden address 8.8.8.8 (not allowed)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, reason := checkAddrs(tt.in, tt.allow, nil)
			if reason != tt.wantReason {
				t.Errorf("checkAddrs() reason = %q, want %q", reason, tt.wantReason)
			}
			if diff := cmp.Diff(tt.want, got, cmp.Comparer(func(a, b netip.Addr) bool { return a == b })); diff != "" {
				t.Errorf("checkAddrs() addresses (-want +got):\n%s", diff)
			}
		})
	}
}
