package egress

import (
	"errors"
	"strings"
	"testing"

	"github.com/agentbox/agentbox/internal/errdefs"
)

func TestCanonicalHost(t *testing.T) {
	const (
		ok      = ""
		invalid = "invalid"
		literal = "ip literal"
	)
	label63 := strings.Repeat("a", 63)
	name253 := strings.Repeat(label63+".", 3) + strings.Repeat("b", 61)
	tests := []struct {
		in, want string
		err      string
	}{
		{in: "allowed.test", want: "allowed.test"},
		{in: "ALLOWED.Test", want: "allowed.test"},
		{in: "allowed.test.", want: "allowed.test"},
		{in: "Allowed.TEST.", want: "allowed.test"},
		{in: "xn--exmple-cua.test", want: "xn--exmple-cua.test"},
		{in: "XN--EXMPLE-CUA.TEST", want: "xn--exmple-cua.test"},
		{in: "a-b.test", want: "a-b.test"},
		{in: "1.2.3.example", want: "1.2.3.example"},
		{in: "0x7f.test", want: "0x7f.test"},
		{in: label63 + ".test", want: label63 + ".test"},
		{in: name253, want: name253},
		{in: name253 + ".", want: name253},

		{in: "", err: invalid},
		{in: ".", err: invalid},
		{in: "allowed.test..", err: invalid},
		{in: "a..test", err: invalid},
		{in: ".allowed.test", err: invalid},
		{in: "-a.test", err: invalid},
		{in: "a-.test", err: invalid},
		{in: "ab--c.test", err: invalid},
		{in: "a_b.test", err: invalid},
		{in: "allowed.test/x", err: invalid},
		{in: "allowed.test?x", err: invalid},
		{in: "allowed.test#x", err: invalid},
		{in: "allowed.test%00", err: invalid},
		{in: "allowed.test\x00", err: invalid},
		{in: "allowed.test evil.test", err: invalid},
		{in: "allowed.test\\evil.test", err: invalid},
		{in: "user@allowed.test", err: invalid},
		// UTS #46, as the allowlist's entries were mapped: the same
		// spelling on both sides.
		{in: "exämple.test", want: "xn--exmple-cua.test"},
		{in: "\u212aelvin.test", want: "kelvin.test"}, // KELVIN SIGN maps to 'k'
		{in: "１２７.０.０.１", err: literal},               // full-width digits are digits
		{in: "127。0。0。1", err: invalid},
		{in: strings.Repeat("a", 64) + ".test", err: invalid},
		{in: name253 + "b", err: invalid},
		{in: "*.allowed.test", err: invalid},

		{in: "127.0.0.1", err: literal},
		{in: "127.0.0.1.", err: literal},
		{in: "127.1", err: literal},
		{in: "2130706433", err: literal},
		{in: "0177.0.0.1", err: literal},
		{in: "0x7f.0.0.1", err: literal},
		{in: "0X7F.1", err: literal},
		{in: "0x7f000001", err: literal},
		{in: "169.254.169.254", err: literal},
		{in: "2852039166", err: literal},
		{in: "0251.0376.0251.0376", err: literal},
		{in: "0xa9fea9fe", err: literal},
		{in: "1.2.3.0x", err: literal},
		{in: "example.123", err: literal},
		{in: "::1", err: literal},
		{in: "[::1]", err: literal},
		{in: "[::ffff:127.0.0.1]", err: literal},
		{in: "[fe80::1%eth0]", err: literal},
		{in: "fe80::1%eth0", err: literal},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := canonicalHost(tt.in)
			gotErr := ok
			switch {
			case isIPLiteral(err):
				gotErr = literal
			case errors.Is(err, errdefs.ErrInvalid):
				gotErr = invalid
			case err != nil:
				t.Fatalf("canonicalHost(%q) error %v has no class", tt.in, err)
			}
			if gotErr != tt.err || got != tt.want {
				t.Errorf("canonicalHost(%q) = %q, %v; want %q, %s", tt.in, got, err, tt.want, tt.err)
			}
		})
	}
}

func TestSplitAuthority(t *testing.T) {
	tests := []struct {
		in, host, port string
		err            bool
	}{
		{in: "allowed.test:443", host: "allowed.test", port: "443"},
		{in: "allowed.test", host: "allowed.test"},
		{in: "allowed.test:", host: "allowed.test"},
		{in: "[::1]:443", host: "[::1]", port: "443"},
		{in: "[::1]", host: "[::1]"},
		{in: "[::1", host: "[::1"},
		{in: "::1:443", host: "::1", port: "443"},
		{in: "[::1]x443", err: true},
		{in: "user@allowed.test:443", err: true},
		{in: "allowed.test:443@evil.test", err: true},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			host, port, err := splitAuthority(tt.in)
			if (err != nil) != tt.err || host != tt.host || port != tt.port {
				t.Errorf("splitAuthority(%q) = %q, %q, %v; want %q, %q, error %v", tt.in, host, port, err, tt.host, tt.port, tt.err)
			}
		})
	}
}

func TestParsePort(t *testing.T) {
	tests := []struct {
		in   string
		def  int
		want int
		err  bool
	}{
		{in: "443", want: 443},
		{in: "1", want: 1},
		{in: "65535", want: 65535},
		{in: "0443", want: 443},
		{in: "", def: 80, want: 80},
		{in: "", err: true},
		{in: "0", err: true},
		{in: "65536", err: true},
		{in: "99999999999999999999", err: true},
		{in: "+443", err: true},
		{in: "-1", err: true},
		{in: "44 3", err: true},
		{in: "0x1bb", err: true},
		{in: "४४३", err: true}, // Devanagari digits
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := parsePort(tt.in, tt.def)
			if (err != nil) != tt.err || got != tt.want {
				t.Errorf("parsePort(%q, %d) = %d, %v; want %d, error %v", tt.in, tt.def, got, err, tt.want, tt.err)
			}
		})
	}
}

func FuzzCanonicalHost(f *testing.F) {
	for _, s := range []string{
		"allowed.test", "ALLOWED.test.", "xn--exmple-cua.test", "127.0.0.1", "0x7f.1",
		"[::1]", "a..b", "exämple.test", "\u212aelvin.test", "a.test..", "-a.b", "ab--c.d",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		out, err := canonicalHost(in)
		if err != nil {
			return
		}
		if out == "" || strings.HasSuffix(out, ".") || len(out) > maxHostLen {
			t.Fatalf("canonicalHost(%q) = %q: empty, dotted or too long", in, out)
		}
		for i := 0; i < len(out); i++ {
			if c := out[i]; c >= 0x80 || ('A' <= c && c <= 'Z') {
				t.Fatalf("canonicalHost(%q) = %q: not lowercase ASCII", in, out)
			}
		}
		again, err := canonicalHost(out)
		if err != nil || again != out {
			t.Fatalf("canonicalHost(%q) = %q, %v; not idempotent on %q", out, again, err, in)
		}
	})
}
