package policy

import (
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/agentbox/agentbox/internal/errdefs"
)

func TestParseHostPattern(t *testing.T) {
	web := []int{80, 443}
	tests := []struct {
		in      string
		want    HostPattern
		wantErr string
	}{
		{in: "example.com", want: HostPattern{Host: "example.com", Ports: web}},
		{in: "Example.COM.", want: HostPattern{Host: "example.com", Ports: web}},
		{in: "api.github.com:443", want: HostPattern{Host: "api.github.com", Ports: []int{443}}},
		{in: "api.github.com.:8443", want: HostPattern{Host: "api.github.com", Ports: []int{8443}}},
		{in: "*.example.com", want: HostPattern{Host: "example.com", Wildcard: true, Ports: web}},
		{in: "*.EXAMPLE.co.uk:8080", want: HostPattern{Host: "example.co.uk", Wildcard: true, Ports: []int{8080}}},
		{in: "bücher.de", want: HostPattern{Host: "xn--bcher-kva.de", Ports: web}},
		{in: "BÜCHER.de", want: HostPattern{Host: "xn--bcher-kva.de", Ports: web}},
		{in: "xn--bcher-kva.de", want: HostPattern{Host: "xn--bcher-kva.de", Ports: web}},
		{in: "XN--BCHER-KVA.de", want: HostPattern{Host: "xn--bcher-kva.de", Ports: web}},
		{in: "*.日本語.jp", want: HostPattern{Host: "xn--wgv71a119e.jp", Wildcard: true, Ports: web}},
		{in: "ελληνικά.gr", want: HostPattern{Host: "xn--hxargifdar.gr", Ports: web}},
		{in: "РОССИЯ.ru", want: HostPattern{Host: "xn--h1alffa9f.ru", Ports: web}},
		{in: "한국.kr", want: HostPattern{Host: "xn--3e0b707e.kr", Ports: web}},
		{in: "ß.de", want: HostPattern{Host: "xn--zca.de", Ports: web}},
		{in: "localhost", want: HostPattern{Host: "localhost", Ports: web}},
		{in: "a-b.example", want: HostPattern{Host: "a-b.example", Ports: web}},
		{in: "x:65535", want: HostPattern{Host: "x", Ports: []int{65535}}},
		{in: strings.Repeat("a", 63) + ".com", want: HostPattern{Host: strings.Repeat("a", 63) + ".com", Ports: web}},

		{in: "", wantErr: "empty host"},
		{in: ".", wantErr: "empty host"},
		{in: "*", wantErr: "a wildcard needs a domain of at least two labels"},
		{in: "*.com", wantErr: "a wildcard needs a domain of at least two labels"},
		{in: "*.com:443", wantErr: "a wildcard needs a domain of at least two labels"},
		{in: "*example.com", wantErr: "a wildcard must be the whole first label"},
		{in: "a.*.com", wantErr: "a wildcard must be the whole first label"},
		{in: "*.foo*.com", wantErr: "a wildcard must be the whole first label"},
		{in: "*.*.example.com", wantErr: "a wildcard must be the whole first label"},
		{in: "**.example.com", wantErr: "a wildcard must be the whole first label"},
		{in: "1.2.3.4", wantErr: "IP addresses are not allowed"},
		{in: "1.2.3.4:443", wantErr: "IP addresses are not allowed"},
		{in: "::1", wantErr: "IP addresses are not allowed"},
		{in: "[::1]", wantErr: "IP addresses are not allowed"},
		{in: "[::1]:443", wantErr: "IP addresses are not allowed"},
		{in: "[2001:db8::1]:80", wantErr: "IP addresses are not allowed"},
		{in: "fe80::1%eth0", wantErr: "IP addresses are not allowed"},
		{in: "127.1", wantErr: "IP addresses are not allowed"},
		{in: "0x7f.1", wantErr: "IP addresses are not allowed"},
		{in: "2130706433", wantErr: "IP addresses are not allowed"},
		{in: "example.0x1F", wantErr: "IP addresses are not allowed"},
		{in: "[example.com]", wantErr: "'[' and ']'"},
		{in: "https://example.com", wantErr: "drop the scheme"},
		{in: "user@example.com", wantErr: "user info"},
		{in: "user:pw@example.com", wantErr: "user info"},
		{in: "example.com/path", wantErr: "drop the path"},
		{in: "example.com?q", wantErr: "drop the path"},
		{in: "example.com#f", wantErr: "drop the path"},
		{in: `example.com\x`, wantErr: "drop the path"},
		{in: "exa mple.com", wantErr: "whitespace"},
		{in: " example.com", wantErr: "whitespace"},
		{in: "example.com\n", wantErr: "control character"},
		{in: "exam\x00ple.com", wantErr: "control character"},
		{in: "example.com\u0085", wantErr: "control character"},
		{in: "example.com\u3000", wantErr: "whitespace"},
		{in: "\xff.com", wantErr: "not valid UTF-8"},
		{in: "a..b.com", wantErr: "empty label"},
		{in: ".example.com", wantErr: "empty label"},
		{in: "example.com..", wantErr: "empty label"},
		{in: strings.Repeat("a", 64) + ".com", wantErr: "longer than 63 bytes"},
		{in: strings.Repeat("abcdefghi.", 26) + "com", wantErr: "longer than 253 bytes"},
		{in: strings.Repeat("a", 2000), wantErr: "longer than 253 bytes"},
		{in: "example.com:", wantErr: `port "" is not a number`},
		{in: "example.com:0", wantErr: `port "0" is not a number in 1..65535`},
		{in: "example.com:65536", wantErr: `port "65536"`},
		{in: "example.com:+80", wantErr: `port "+80"`},
		{in: "example.com:https", wantErr: `port "https"`},
		{in: "a:b:80", wantErr: "more than one ':'"},
		{in: "a_b.com", wantErr: `character '_' (U+005F) is not allowed`},
		{in: "-a.com", wantErr: "starts or ends with '-'"},
		{in: "a-.com", wantErr: "starts or ends with '-'"},
		{in: "ab--c.com", wantErr: `"--" in the third and fourth places`},
		{in: "xn--zz.com", wantErr: "not a valid international (xn--) label"},
		{in: "xn--abc-.com", wantErr: "not a valid international (xn--) label"},
		{in: "xn--.com", wantErr: "not a valid international (xn--) label"},
		// UTS #46 as browsers apply it: full-width letters are the ASCII
		// ones, other scripts have their xn-- form, a joiner out of
		// context is refused.
		{in: "ｅｘａｍｐｌｅ.com", want: HostPattern{Host: "example.com", Ports: []int{80, 443}}},
		{in: "a\u200db.com", wantErr: "not a valid host name label"},
		{in: "İ.com", want: HostPattern{Host: "xn--i-9bb.com", Ports: []int{80, 443}}},
		{in: "עברית.co.il", want: HostPattern{Host: "xn--5dbqzzl.co.il", Ports: []int{80, 443}}},
		{in: "exa%41mple.com", wantErr: "'%' (U+0025) is not allowed"},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := ParseHostPattern(tt.in)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) || !errors.Is(err, errdefs.ErrInvalid) {
					t.Fatalf("ParseHostPattern(%q) = %+v, %v; want an invalid error containing %q", tt.in, got, err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("ParseHostPattern(%q): %v", tt.in, err)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("ParseHostPattern(%q) (-want +got):\n%s", tt.in, diff)
			}
			// The canonical form parses to itself.
			again, err := ParseHostPattern(got.String())
			if err != nil {
				t.Fatalf("ParseHostPattern(%q) (canonical form): %v", got.String(), err)
			}
			if diff := cmp.Diff(got, again); diff != "" {
				t.Errorf("canonical form %q does not parse to itself (-first +again):\n%s", got.String(), diff)
			}
		})
	}
}

func TestHostPatternString(t *testing.T) {
	tests := map[string]string{
		"Example.COM.":           "example.com",
		"example.com:443":        "example.com:443",
		"*.Example.com:80":       "*.example.com:80",
		"*.bücher.de":            "*.xn--bcher-kva.de",
		"api.github.com.:443":    "api.github.com:443",
		"xn--bcher-kva.DE:08443": "xn--bcher-kva.de:8443",
	}
	for in, want := range tests {
		t.Run(in, func(t *testing.T) {
			p, err := ParseHostPattern(in)
			if err != nil {
				t.Fatal(err)
			}
			if got := p.String(); got != want {
				t.Errorf("String() = %q, want %q", got, want)
			}
		})
	}
}

func TestCanonicalHost(t *testing.T) {
	tests := []struct {
		in, want, wantErr string
	}{
		{in: "Example.COM.", want: "example.com"},
		{in: "bücher.de", want: "xn--bcher-kva.de"},
		{in: "API.GitHub.com", want: "api.github.com"},
		{in: "example.com:443", wantErr: "has a port"},
		{in: "*.example.com", wantErr: "'*' is not allowed"},
		{in: "10.0.0.1", wantErr: "IP addresses are not allowed"},
		{in: "169.254.169.254", wantErr: "IP addresses are not allowed"},
		{in: "[fd00::1]", wantErr: "IP addresses are not allowed"},
		{in: "", wantErr: "empty host"},
		// Mapped to a label IDNA then refuses (found by FuzzCanonicalHost):
		// a name is canonical only if its canonical form is.
		{in: "ℵA.com", wantErr: "its IDNA form xn--a-zhc is not valid"},
		{in: "xn--a-zhc.com", wantErr: "not a valid international (xn--) label"},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := CanonicalHost(tt.in)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) || !errors.Is(err, errdefs.ErrInvalid) {
					t.Fatalf("CanonicalHost(%q) = %q, %v; want an invalid error containing %q", tt.in, got, err, tt.wantErr)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("CanonicalHost(%q) = %q, %v; want %q", tt.in, got, err, tt.want)
			}
			if again, err := CanonicalHost(got); err != nil || again != got {
				t.Errorf("CanonicalHost(%q) = %q, %v; want it unchanged", got, again, err)
			}
		})
	}
}

func TestMatches(t *testing.T) {
	tests := []struct {
		pattern string
		host    string
		port    int
		want    bool
	}{
		{"example.com", "example.com", 443, true},
		{"example.com", "example.com", 80, true},
		{"example.com", "example.com", 8443, false},
		{"example.com", "example.com", 0, false},
		{"example.com", "evilexample.com", 443, false},
		{"example.com", "example.com.evil.com", 443, false},
		{"example.com", "a.example.com", 443, false},
		{"example.com:8443", "example.com", 8443, true},
		{"example.com:8443", "example.com", 443, false},
		{"*.example.com", "a.example.com", 443, true},
		{"*.example.com", "a.b.example.com", 80, true},
		{"*.example.com", "example.com", 443, false},
		{"*.example.com", "badexample.com", 443, false},
		{"*.example.com", "a.badexample.com", 443, false},
		{"*.example.com", "example.com.evil.net", 443, false},
		{"*.example.com", "a.example.com.evil.net", 443, false},
		{"*.example.com", ".example.com", 443, false},
		{"*.example.com:8080", "a.example.com", 8080, true},
		{"*.example.com:8080", "a.example.com", 443, false},
		// Matches takes canonical input only: it does no folding itself.
		{"example.com", "EXAMPLE.com", 443, false},
		{"example.com", "example.com.", 443, false},
		{"bücher.de", "xn--bcher-kva.de", 443, true},
		{"bücher.de", "bücher.de", 443, false},
	}
	for _, tt := range tests {
		t.Run(tt.pattern+"/"+tt.host, func(t *testing.T) {
			p, err := ParseHostPattern(tt.pattern)
			if err != nil {
				t.Fatal(err)
			}
			if got := p.Matches(tt.host, tt.port); got != tt.want {
				t.Errorf("%q.Matches(%q, %d) = %v, want %v", tt.pattern, tt.host, tt.port, got, tt.want)
			}
		})
	}
}

func TestOverlaps(t *testing.T) {
	tests := []struct {
		a, b string
		want bool
	}{
		{"example.com", "example.com", true},
		{"example.com", "example.com:443", true},
		{"example.com:8443", "example.com", false},
		{"example.com", "other.com", false},
		{"api.example.com", "*.example.com", true},
		{"example.com", "*.example.com", false},
		{"*.api.example.com", "*.example.com", true},
		{"*.example.com", "*.example.com:443", true},
		{"*.example.com", "*.other.com", false},
		{"*.example.com", "*.badexample.com", false},
	}
	for _, tt := range tests {
		t.Run(tt.a+"/"+tt.b, func(t *testing.T) {
			a, err := ParseHostPattern(tt.a)
			if err != nil {
				t.Fatal(err)
			}
			b, err := ParseHostPattern(tt.b)
			if err != nil {
				t.Fatal(err)
			}
			if got := a.overlaps(b); got != tt.want {
				t.Errorf("%q overlaps %q = %v, want %v", tt.a, tt.b, got, tt.want)
			}
			if got := b.overlaps(a); got != tt.want {
				t.Errorf("%q overlaps %q = %v, want %v", tt.b, tt.a, got, tt.want)
			}
		})
	}
}

// TestIDNA checks names against their encodings by other IDNA
// implementations, and the refusals that matter for an allowlist.
func TestIDNA(t *testing.T) {
	ok := map[string]string{
		"bücher.de":         "xn--bcher-kva.de",
		"BÜCHER.de":         "xn--bcher-kva.de",
		"ß.de":              "xn--zca.de",
		"日本語.jp":            "xn--wgv71a119e.jp",
		"ελληνικά.gr":       "xn--hxargifdar.gr",
		"россия.рф":         "xn--h1alffa9f.xn--p1ai",
		"한국.kr":             "xn--3e0b707e.kr",
		"xn--bcher-kva.de":  "xn--bcher-kva.de",
		"XN--BCHER-KVA.DE.": "xn--bcher-kva.de",
	}
	for in, want := range ok {
		t.Run(in, func(t *testing.T) {
			if got, err := CanonicalHost(in); err != nil || got != want {
				t.Errorf("CanonicalHost(%q) = %q, %v; want %q", in, got, err, want)
			}
		})
	}
	for _, in := range []string{
		"a\u3002b.test", // an ideographic full stop would split the label
		"xn--a.test",    // not valid punycode
		"xn--bcher-kva-.de",
		"under_score.test", // STD3: letters, digits and '-'
		"-lead.test",
		"trail-.test",
		"a b.test",
	} {
		in = strings.ReplaceAll(in, "\\u3002", "\u3002")
		t.Run("refused "+in, func(t *testing.T) {
			if got, err := CanonicalHost(in); err == nil {
				t.Errorf("CanonicalHost(%q) = %q, want an error", in, got)
			}
		})
	}
}
