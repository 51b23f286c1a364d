package egress

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync"
	"testing"

	"github.com/agentbox/agentbox/internal/errdefs"
	"github.com/agentbox/agentbox/internal/testutil/syncbuf"
)

func TestParseResolveAllowance(t *testing.T) {
	good := []struct {
		host  string
		addrs []string
		want  []string
	}{
		{"registry.npmjs.org", []string{"192.0.2.0/24"}, []string{"192.0.2.0/24"}},
		{"mirror.internal.example", []string{"10.1.2.3", "fd12::1", "10.0.0.0/8"}, []string{"10.1.2.3/32", "fd12::1/128", "10.0.0.0/8"}},
		{"mirror.test", []string{"127.0.0.1"}, []string{"127.0.0.1/32"}},
	}
	for _, tt := range good {
		a, err := ParseResolveAllowance(tt.host, tt.addrs)
		if err != nil {
			t.Errorf("ParseResolveAllowance(%q, %q): %v", tt.host, tt.addrs, err)
			continue
		}
		var got []string
		for _, p := range a.Prefixes {
			got = append(got, p.String())
		}
		if a.Host != tt.host || fmt.Sprint(got) != fmt.Sprint(tt.want) {
			t.Errorf("ParseResolveAllowance(%q, %q) = %s %v, want %s %v", tt.host, tt.addrs, a.Host, got, tt.host, tt.want)
		}
	}
	bad := []struct {
		host  string
		addrs []string
		want  string
	}{
		{"*", []string{"10.0.0.1"}, "wildcard"},
		{"*.npmjs.org", []string{"10.0.0.1"}, "wildcard"},
		{"Registry.npmjs.org", []string{"10.0.0.1"}, "write it as registry.npmjs.org"},
		{"registry.npmjs.org.", []string{"10.0.0.1"}, "write it as registry.npmjs.org"},
		{"127.0.0.1", []string{"127.0.0.1"}, "not a host name"},
		{"[::1]", []string{"::1"}, "not a host name"},
		{"", []string{"10.0.0.1"}, "not a host name"},
		{"mirror.test", nil, "no addresses"},
		{"mirror.test", []string{"0.0.0.0/0"}, "covers too much"},
		{"mirror.test", []string{"::/0"}, "covers too much"},
		{"mirror.test", []string{"10.0.0.0/7"}, "covers too much"},
		{"mirror.test", []string{"fc00::/7"}, "covers too much"},
		{"mirror.test", []string{"192.0.2.1/24"}, "write 192.0.2.0/24"},
		{"mirror.test", []string{"169.254.0.0/16"}, "metadata"},
		{"mirror.test", []string{"169.254.169.254"}, "metadata"},
		{"mirror.test", []string{"0.0.0.0"}, "this network"},
		{"mirror.test", []string{"224.0.0.0/8"}, "multicast"},
		{"mirror.test", []string{"::"}, "unspecified"},
		{"mirror.test", []string{"::ffff:127.0.0.1"}, "IPv4-mapped"},
		{"mirror.test", []string{"fe80::1%eth0"}, "zone"},
		{"mirror.test", []string{"10.0.0.1", "example.com"}, "addresses[1]"},
	}
	for _, tt := range bad {
		_, err := ParseResolveAllowance(tt.host, tt.addrs)
		if err == nil || !errors.Is(err, errdefs.ErrInvalid) || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("ParseResolveAllowance(%q, %q) = %v, want an invalid error saying %q", tt.host, tt.addrs, err, tt.want)
		}
	}
}

// TestResolveAllowance runs the proxy with its production address rules
// (no AllowAddr): loopback is refused, except for the one host the
// operator allowed, at the one address allowed, and each use is logged
// and counted.
func TestResolveAllowance(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "mirror")
	}))
	defer up.Close()
	port := addrPort(t, up.Listener.Addr()).Port()

	allowance, err := ParseResolveAllowance("mirror.test", []string{"127.0.0.1"})
	if err != nil {
		t.Fatal(err)
	}
	mixed, err := ParseResolveAllowance("mixed.test", []string{"127.0.0.0/8"})
	if err != nil {
		t.Fatal(err)
	}
	logs := &syncbuf.Buffer{}
	var (
		mu   sync.Mutex
		uses []string
	)
	e := newEnv(t, func(o *Options) {
		o.AllowAddr = nil
		o.ResolveAllow = []ResolveAllowance{allowance, mixed}
		o.Logger = slog.New(slog.NewJSONHandler(logs, nil))
		o.OnResolveAllow = func(host string, a netip.Addr) {
			mu.Lock()
			uses = append(uses, host+"="+a.String())
			mu.Unlock()
		}
	})
	e.res.set("mirror.test", []netip.Addr{loopback4})
	e.res.set("other.test", []netip.Addr{loopback4})
	e.res.set("mixed.test", []netip.Addr{loopback4, netip.MustParseAddr("10.0.0.1")})
	e.res.set("six.test", []netip.Addr{loopback6})

	get := func(host string, allow Allowlist) (int, string) {
		t.Helper()
		c := e.serve(t.Context(), sandbox(allow))
		fmt.Fprintf(c, "GET http://%s:%d/ HTTP/1.1\r\nHost: %s\r\n\r\n", host, port, host)
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatalf("reading the answer for %s: %v", host, err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		c.Close()
		e.next()
		return resp.StatusCode, strings.TrimSpace(string(b))
	}

	if code, body := get("mirror.test", allowAll{}); code != 200 || body != "mirror" {
		t.Errorf("the allowed host: %d %q, want 200 \"mirror\"", code, body)
	}
	// Refusals: another host at the same address, the allowed host at an
	// address outside its allowance (whole answer refused), the allowed
	// host without the sandbox's own allowlist, an IPv6 loopback.
	for _, tt := range []struct {
		host  string
		allow Allowlist
		want  string
	}{
		{"other.test", allowAll{}, "forbidden address 127.0.0.1 (loopback)"},
		{"mixed.test", allowAll{}, "forbidden address 10.0.0.1 (private)"},
		{"mirror.test", allowSet{"other.test:80"}, reasonNotAllowed},
		{"mirror.test", nil, reasonNotAllowed},
		{"six.test", allowAll{}, "forbidden address ::1 (loopback)"},
	} {
		if code, body := get(tt.host, tt.allow); code != http.StatusForbidden || body != tt.want {
			t.Errorf("%s: %d %q, want 403 %q", tt.host, code, body, tt.want)
		}
	}
	mu.Lock()
	gotUses := strings.Join(uses, ",")
	mu.Unlock()
	if gotUses != "mirror.test=127.0.0.1" || e.p.ResolveAllowanceUses() != 1 {
		t.Errorf("uses reported %q (counted %d), want exactly mirror.test=127.0.0.1 once", gotUses, e.p.ResolveAllowanceUses())
	}
	var logged int
	for _, line := range bytes.Split([]byte(logs.String()), []byte("\n")) {
		if bytes.Contains(line, []byte(`"msg":"egress resolve allowance used"`)) {
			logged++
			for _, want := range []string{`"level":"INFO"`, `"host":"mirror.test"`, `"addr":"127.0.0.1"`, `"sandbox_id":"` + sandboxID + `"`} {
				if !bytes.Contains(line, []byte(want)) {
					t.Errorf("allowance log line %s lacks %s", line, want)
				}
			}
		}
	}
	if logged != 1 {
		t.Errorf("%d allowance log lines, want 1:\n%s", logged, []byte(logs.String()))
	}

	// The daemon's own dial meets the same checks.
	addr := fmt.Sprintf("mirror.test:%d", port)
	c, err := e.p.Dial(t.Context(), "deps", allowSet{addr}, "tcp", addr)
	if err != nil {
		t.Fatalf("Dial(%s): %v", addr, err)
	}
	c.Close()
	// It is reported as every decision is, as the daemon's, for whom it
	// dialed.
	if d := e.next(); !d.Daemon || !d.Allowed || d.SandboxID != "deps" || d.Method != "DIAL" || d.Host != "mirror.test" || d.Port != int(port) || !d.Addr.IsValid() {
		t.Errorf("the daemon's dial reported as %+v", d)
	}
	if e.p.ResolveAllowanceUses() != 2 {
		t.Errorf("Dial did not count its use of the allowance: %d uses", e.p.ResolveAllowanceUses())
	}
	for _, tt := range []struct{ addr, allowed, want string }{
		{fmt.Sprintf("other.test:%d", port), fmt.Sprintf("other.test:%d", port), "forbidden address 127.0.0.1 (loopback)"},
		{addr, "other.test:1", reasonNotAllowed},
		{fmt.Sprintf("127.0.0.1:%d", port), fmt.Sprintf("127.0.0.1:%d", port), reasonIPLiteral},
	} {
		_, err := e.p.Dial(t.Context(), "deps", allowSet{tt.allowed}, "tcp", tt.addr)
		if !errors.Is(err, errdefs.ErrPolicyDenied) || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("Dial(%s) = %v, want denied: %s", tt.addr, err, tt.want)
		}
		if d := e.next(); !d.Daemon || d.Allowed || d.SandboxID != "deps" || d.Reason != tt.want {
			t.Errorf("Dial(%s) reported as %+v, want denied: %s", tt.addr, d, tt.want)
		}
	}
	e.noMore()
	var _ net.Conn = c
}
