package egress

// The proxy canonicalises targets with the policy package's CanonicalHost,
// the same function that canonicalised the allowlist entries, so that the
// two compare like with like (lowercase, one trailing dot dropped, UTS #46
// lookup mapping to the xn-- form). What is added here is the refusal of
// IP literals with their own reason: a policy names hosts, and an address
// would escape the resolver's checks.

import (
	"errors"
	"fmt"
	"strings"

	"github.com/agentbox/agentbox/internal/errdefs"
	"github.com/agentbox/agentbox/internal/policy"
)

// maxHostLen is the longest DNS name in its dotted form.
const maxHostLen = 253

var (
	// errIPLiteral marks a target that names an address, not a host:
	// policies name hosts, and an address escapes the resolver's checks.
	errIPLiteral = fmt.Errorf("ip literal: %w", errdefs.ErrPolicyDenied)
	// errUserinfo marks "user@host": parsers disagree on which part is the
	// host, so the proxy takes neither.
	errUserinfo = fmt.Errorf("userinfo: %w", errdefs.ErrPolicyDenied)
)

// canonicalHost returns the one spelling of host that the allowlist, the
// resolver and the log all see. IP literals in any spelling that a
// resolver or URL parser would take as one ("[::1]", "2130706433",
// "0x7f.1", "127.1", and their full-width forms, which IDNA maps to
// digits) are refused with errIPLiteral.
func canonicalHost(host string) (string, error) {
	if host == "" {
		return "", errdefs.Invalid("empty host")
	}
	if len(host) > 4*(maxHostLen+1) {
		return "", errdefs.Invalid("host %s: longer than %d bytes", quoteRaw(host), maxHostLen)
	}
	if strings.ContainsAny(host, "[]:") {
		return "", fmt.Errorf("host %s: %w", quoteRaw(host), errIPLiteral)
	}
	if endsInNumber(strings.TrimSuffix(strings.ToLower(host), ".")) {
		return "", fmt.Errorf("host %s: %w", quoteRaw(host), errIPLiteral)
	}
	h, err := policy.CanonicalHost(host)
	if err != nil {
		return "", fmt.Errorf("target %w", err)
	}
	if endsInNumber(h) {
		return "", fmt.Errorf("host %s: %w", quoteRaw(host), errIPLiteral)
	}
	return h, nil
}

// endsInNumber is the WHATWG URL test for a host that is parsed as IPv4:
// its last label is decimal digits, or "0x" and hex digits. That covers
// "2130706433", "0177.0.0.1", "0x7f.1" and "127.1" alike; no top-level
// domain is numeric, so nothing real is lost.
func endsInNumber(host string) bool {
	last := host[strings.LastIndexByte(host, '.')+1:]
	if last == "" {
		return false
	}
	if rest, ok := strings.CutPrefix(last, "0x"); ok {
		return strings.Trim(rest, "0123456789abcdef") == ""
	}
	return strings.Trim(last, "0123456789") == ""
}

// splitAuthority splits "host:port" (IPv6 in brackets) without judging
// either part. port is empty when there is none.
func splitAuthority(authority string) (host, port string, err error) {
	if strings.Contains(authority, "@") {
		return "", "", fmt.Errorf("target %s: %w", quoteRaw(authority), errUserinfo)
	}
	if strings.HasPrefix(authority, "[") {
		i := strings.IndexByte(authority, ']')
		if i < 0 {
			// canonicalHost refuses it as an IP literal.
			return authority, "", nil
		}
		host, rest := authority[:i+1], authority[i+1:]
		if rest == "" {
			return host, "", nil
		}
		if rest[0] != ':' {
			return "", "", errdefs.Invalid("target %s: junk after address", quoteRaw(authority))
		}
		return host, rest[1:], nil
	}
	i := strings.LastIndexByte(authority, ':')
	if i < 0 {
		return authority, "", nil
	}
	return authority[:i], authority[i+1:], nil
}

var errNoPort = errdefs.Invalid("missing port")

// parsePort parses a decimal port in 1..65535. An empty port means def, and
// is an error when def is 0.
func parsePort(s string, def int) (int, error) {
	if s == "" {
		if def == 0 {
			return 0, errNoPort
		}
		return def, nil
	}
	if len(s) > 5 {
		return 0, errdefs.Invalid("port %s: out of range", quoteRaw(s))
	}
	n := 0
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return 0, errdefs.Invalid("port %s: not a number", quoteRaw(s))
		}
		n = n*10 + int(s[i]-'0')
	}
	if n < 1 || n > 65535 {
		return 0, errdefs.Invalid("port %s: out of range", quoteRaw(s))
	}
	return n, nil
}

// isIPLiteral reports whether err refuses a target for naming an address.
func isIPLiteral(err error) bool { return errors.Is(err, errIPLiteral) }
