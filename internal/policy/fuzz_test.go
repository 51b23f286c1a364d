package policy

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/agentbox/agentbox/internal/errdefs"
)

// FuzzParse feeds Parse arbitrary documents: it never panics, refuses
// with one line of the invalid class, and whatever it accepts is
// canonical: its JSON encoding parses back to the same policy.
func FuzzParse(f *testing.F) {
	for _, name := range []string{"policy.yaml", "policy.json"} {
		b, err := os.ReadFile(filepath.Join("testdata", name))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	for _, s := range []string{
		"",
		"{}",
		"network: {mode: allowlist, allow: ['*.example.com:8443', bücher.de]}",
		"secrets: {A: {hosts: [a.b.c], header: X-Key, format: 'k={{value}}'}}\nnetwork: {mode: allowlist, allow: ['*.b.c']}",
		"limits: {memory: 1.5G, tmp: 100k, exec_timeout: 90, sandbox_timeout: 1h30m, cpus: 0.5, pids: 64}",
		`{"env": {"A": "\u0000"}, "writable_paths": ["src/**", "../x"]}`,
		"env: {A: x}\n---\nenv: {B: y}",
		`{"a": 1, "a": 2}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		p, err := Parse(data)
		if err != nil {
			if !errors.Is(err, errdefs.ErrInvalid) {
				t.Fatalf("error %v is not of the invalid class", err)
			}
			if strings.Contains(err.Error(), "\n") {
				t.Fatalf("error has more than one line: %q", err)
			}
			return
		}
		if err := p.Validate(Ceilings{}); err != nil {
			t.Fatalf("Validate of a parsed policy: %v", err)
		}
		b, err := json.Marshal(p)
		if err != nil {
			t.Fatalf("marshal %+v: %v", p, err)
		}
		again, err := Parse(b)
		if err != nil {
			t.Fatalf("Parse(%s) of a parsed policy: %v", b, err)
		}
		if diff := cmp.Diff(p, again); diff != "" {
			t.Fatalf("re-parsed %s (-first +again):\n%s", b, diff)
		}
	})
}

// FuzzHostPattern feeds ParseHostPattern arbitrary entries: it never
// panics, and an accepted pattern is canonical (lower case ASCII, no
// trailing dot, parses to itself) and matches what it names.
func FuzzHostPattern(f *testing.F) {
	for _, s := range []string{
		"example.com", "Example.COM.", "*.example.com:443", "bücher.de", "xn--bcher-kva.de",
		"*.日本語.jp", "1.2.3.4", "[::1]:80", "a..b", "*.com", "ß.de", "xn--zca.de", "0x7f.1",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		p, err := ParseHostPattern(s)
		if err != nil {
			if !errors.Is(err, errdefs.ErrInvalid) {
				t.Fatalf("error %v is not of the invalid class", err)
			}
			return
		}
		for i := 0; i < len(p.Host); i++ {
			c := p.Host[i]
			if !('a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '-' || c == '.') {
				t.Fatalf("%q: host %q has byte %q", s, p.Host, c)
			}
		}
		if p.Host == "" || strings.HasSuffix(p.Host, ".") || len(p.Host) > maxNameBytes {
			t.Fatalf("%q: host %q", s, p.Host)
		}
		again, err := ParseHostPattern(p.String())
		if err != nil {
			t.Fatalf("%q: canonical form %q: %v", s, p.String(), err)
		}
		if diff := cmp.Diff(p, again); diff != "" {
			t.Fatalf("%q: canonical form %q parses differently (-first +again):\n%s", s, p.String(), diff)
		}
		port := p.Ports[0]
		if p.Wildcard {
			if !p.Matches("a."+p.Host, port) || p.Matches(p.Host, port) {
				t.Fatalf("%q: wildcard %+v matches wrongly", s, p)
			}
			return
		}
		if !p.Matches(p.Host, port) {
			t.Fatalf("%q: %+v does not match its own host", s, p)
		}
		if h, err := CanonicalHost(p.Host); err != nil || h != p.Host {
			t.Fatalf("%q: CanonicalHost(%q) = %q, %v", s, p.Host, h, err)
		}
	})
}
