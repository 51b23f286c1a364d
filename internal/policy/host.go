package policy

import (
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/agentbox/agentbox/internal/errdefs"
)

// Limits of DNS names (RFC 1035), counted on the ASCII form.
const (
	maxLabelBytes = 63
	maxNameBytes  = 253
)

// defaultPorts are the ports of an entry that names none: plain and TLS HTTP.
var defaultPorts = []int{80, 443}

// HostPattern is one canonical network.allow or secrets.*.hosts entry.
type HostPattern struct {
	// Host is the canonical name: lower case ASCII (IDNA labels in their
	// xn-- form), no trailing dot. For a wildcard it is the domain after
	// "*.".
	Host string `json:"host"`
	// Wildcard makes the pattern match every name under Host, at any
	// depth, but not Host itself.
	Wildcard bool `json:"wildcard,omitempty"`
	// Ports are the ports the pattern allows, sorted: the one written in
	// the entry, or 80 and 443.
	Ports []int `json:"ports"`
}

// ParseHostPattern parses and canonicalises "host", "host:port",
// "*.domain" or "*.domain:port". IP literals are refused: a policy names
// hosts, and the egress proxy resolves them itself.
func ParseHostPattern(s string) (HostPattern, error) {
	p, reason := parseHost(s, true)
	if reason != "" {
		return HostPattern{}, errdefs.Invalid("host pattern %s: %s", quote(s), reason)
	}
	return p, nil
}

// CanonicalHost canonicalises one target host name (no wildcard, no
// port) exactly the way ParseHostPattern canonicalises patterns, so that
// the egress proxy compares like with like.
func CanonicalHost(s string) (string, error) {
	p, reason := parseHost(s, false)
	if reason != "" {
		return "", errdefs.Invalid("host %s: %s", quote(s), reason)
	}
	return p.Host, nil
}

// Matches reports whether the pattern allows host on port. host must
// already be canonical (the output of CanonicalHost): Matches compares
// bytes and does no folding of its own, so "EXAMPLE.com" never matches.
// Labels are matched whole: "*.example.com" matches "a.example.com" and
// "a.b.example.com" but not "example.com" or "badexample.com".
func (p HostPattern) Matches(host string, port int) bool {
	if !slices.Contains(p.Ports, port) {
		return false
	}
	if !p.Wildcard {
		return host == p.Host
	}
	n := len(host) - len(p.Host)
	return n > 1 && host[n-1] == '.' && host[n:] == p.Host
}

// String returns the canonical entry: "host" or "*.domain", with
// ":port" unless Ports is the default pair. (A parsed pattern has either
// the default pair or one port.)
func (p HostPattern) String() string {
	s := p.Host
	if p.Wildcard {
		s = "*." + s
	}
	if len(p.Ports) == 1 {
		s += ":" + strconv.Itoa(p.Ports[0])
	}
	return s
}

// overlaps reports whether some host and port are matched by both p and q.
func (p HostPattern) overlaps(q HostPattern) bool {
	if !slices.ContainsFunc(p.Ports, func(port int) bool { return slices.Contains(q.Ports, port) }) {
		return false
	}
	under := func(name, domain string) bool { return strings.HasSuffix(name, "."+domain) }
	switch {
	case !p.Wildcard && !q.Wildcard:
		return p.Host == q.Host
	case p.Wildcard && q.Wildcard:
		return p.Host == q.Host || under(p.Host, q.Host) || under(q.Host, p.Host)
	case p.Wildcard:
		return under(q.Host, p.Host)
	default:
		return under(p.Host, q.Host)
	}
}

// parseHost does the work of ParseHostPattern (pattern true: a wildcard
// and a port are allowed) and CanonicalHost. It returns the reason for a
// refusal rather than an error so that callers can put the field path
// first.
func parseHost(s string, pattern bool) (HostPattern, string) {
	switch {
	case s == "":
		return HostPattern{}, "empty host"
	case len(s) > 4*maxNameBytes:
		// Long enough for any name that could canonicalise to 253 bytes;
		// stops the work early on hostile input.
		return HostPattern{}, fmt.Sprintf("longer than %d bytes", maxNameBytes)
	case !utf8.ValidString(s):
		return HostPattern{}, "not valid UTF-8"
	}
	for _, r := range s {
		switch {
		case r < 0x20 || r == 0x7f || (r >= 0x80 && r < 0xa0):
			return HostPattern{}, "contains a control character"
		case unicode.IsSpace(r):
			return HostPattern{}, "contains whitespace"
		}
	}
	switch {
	case strings.Contains(s, "://"):
		return HostPattern{}, `a host, not a URL: drop the scheme ("https://")`
	case strings.Contains(s, "@"):
		return HostPattern{}, `user info ("user@") is not allowed`
	case strings.ContainsAny(s, `/?#\`):
		return HostPattern{}, "a host, not a URL: drop the path, query and fragment"
	case isIPLiteral(s):
		return HostPattern{}, "IP addresses are not allowed: a policy names hosts"
	case strings.ContainsAny(s, "[]"):
		return HostPattern{}, `'[' and ']' are only for IPv6 addresses, which are not allowed`
	}

	host, ports := s, defaultPorts
	if i := strings.LastIndexByte(s, ':'); i >= 0 {
		if !pattern {
			return HostPattern{}, "has a port: give the host name alone"
		}
		port, ok := parsePort(s[i+1:])
		if !ok {
			return HostPattern{}, fmt.Sprintf("port %s is not a number in 1..65535", quote(s[i+1:]))
		}
		host, ports = s[:i], []int{port}
		if strings.Contains(host, ":") {
			return HostPattern{}, "more than one ':'"
		}
	}
	host = strings.TrimSuffix(host, ".")

	wildcard := false
	if strings.Contains(host, "*") {
		if !pattern {
			return HostPattern{}, "'*' is not allowed: a target is one host"
		}
		rest, ok := strings.CutPrefix(host, "*.")
		if host != "*" && (!ok || strings.Contains(rest, "*")) {
			return HostPattern{}, `a wildcard must be the whole first label, as in "*.example.com"`
		}
		if host == "*" || !strings.Contains(rest, ".") {
			return HostPattern{}, `a wildcard needs a domain of at least two labels after it, as in "*.example.com"`
		}
		host, wildcard = rest, true
	}
	if host == "" {
		return HostPattern{}, "empty host"
	}
	if _, err := netip.ParseAddr(host); err == nil || endsInNumber(host) {
		return HostPattern{}, "IP addresses are not allowed: a policy names hosts"
	}

	labels := strings.Split(host, ".")
	for i, l := range labels {
		if l == "" {
			return HostPattern{}, `empty label (".." or a leading '.')`
		}
		ascii, reason := labelToASCII(l)
		if reason != "" {
			return HostPattern{}, fmt.Sprintf("label %s: %s", quote(l), reason)
		}
		if len(ascii) > maxLabelBytes {
			return HostPattern{}, fmt.Sprintf("label %s is longer than %d bytes", quote(l), maxLabelBytes)
		}
		labels[i] = ascii
	}
	host = strings.Join(labels, ".")
	if len(host) > maxNameBytes {
		return HostPattern{}, fmt.Sprintf("longer than %d bytes", maxNameBytes)
	}
	return HostPattern{Host: host, Wildcard: wildcard, Ports: ports}, ""
}

// isIPLiteral recognises an IPv6 address with or without brackets and a
// port, and an IPv4 address with a port; plain IPv4 is caught after the
// port is split off.
func isIPLiteral(s string) bool {
	if _, err := netip.ParseAddrPort(s); err == nil {
		return true
	}
	s = strings.TrimSuffix(strings.TrimPrefix(s, "["), "]")
	if i := strings.IndexByte(s, '%'); i >= 0 {
		s = s[:i] // zone
	}
	_, err := netip.ParseAddr(s)
	return err == nil
}

// endsInNumber is the WHATWG URL rule for "this host is an IPv4
// address": a last label of digits or 0x and hex digits. Resolvers built
// on inet_aton read "127.1" and "0x7f.1" as addresses, so such names are
// refused rather than passed to one.
func endsInNumber(host string) bool {
	last := host[strings.LastIndexByte(host, '.')+1:]
	if last == "" {
		return false
	}
	if strings.Trim(last, "0123456789") == "" {
		return true
	}
	hex, ok := strings.CutPrefix(strings.ToLower(last), "0x")
	return ok && strings.Trim(hex, "0123456789abcdef") == ""
}

// parsePort accepts decimal digits only (no sign, no spaces) in 1..65535.
func parsePort(s string) (int, bool) {
	if s == "" || len(s) > 5 || strings.Trim(s, "0123456789") != "" {
		return 0, false
	}
	n, err := strconv.Atoi(s)
	return n, err == nil && n >= 1 && n <= 65535
}

// quote quotes s for an error message, cut short so that a hostile
// megabyte-long value does not become a megabyte-long error.
func quote(s string) string {
	const max = 80
	if len(s) <= max {
		return strconv.Quote(s)
	}
	cut := max
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return strconv.Quote(s[:cut]) + "..."
}
