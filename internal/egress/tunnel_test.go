package egress

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/agentbox/agentbox/internal/testutil/skip"
)

func TestConnectTLSEndToEnd(t *testing.T) {
	ts, pool := tlsUpstream(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, "hello from "+r.Host)
	}))
	up := addrPort(t, ts.Listener.Addr())
	e := newEnv(t, nil)
	e.res.set(allowedHost, []netip.Addr{loopback4})
	port := int(up.Port())
	target := net.JoinHostPort(allowedHost, strconv.Itoa(port))
	c := e.serve(t.Context(), sandbox(allowSet{target}))

	br, resp := connect(t, c, target, nil)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("CONNECT status = %d, want 200", resp.StatusCode)
	}
	tc := tls.Client(bufConn{c, br}, &tls.Config{RootCAs: pool, ServerName: allowedHost})
	req, _ := http.NewRequest(http.MethodGet, "https://"+target+"/", nil)
	if err := req.Write(tc); err != nil {
		t.Fatalf("writing over TLS: %v", err)
	}
	got, err := http.ReadResponse(bufio.NewReader(tc), req)
	if err != nil {
		t.Fatalf("reading over TLS: %v", err)
	}
	if body := readBody(t, got); body != "hello from "+target {
		t.Errorf("body = %q, want %q", body, "hello from "+target)
	}
	tc.Close()

	d := e.next()
	want := Decision{
		SandboxID: sandboxID, Method: "CONNECT", Host: allowedHost, Port: port,
		Addr: up, Allowed: true, Reason: "allowed",
	}
	if diff := cmp.Diff(want, d, ignoreTiming, cmpopts.IgnoreFields(Decision{}, "BytesUp", "BytesDown")); diff != "" {
		t.Errorf("decision (-want +got):\n%s", diff)
	}
	if d.BytesUp < 500 || d.BytesDown < 500 {
		t.Errorf("bytes up %d, down %d: want a TLS handshake's worth each way", d.BytesUp, d.BytesDown)
	}
}

// TestConnectBytes checks the counts against exactly what each side sent,
// with the ClientHello pipelined behind the CONNECT, split over records,
// or dribbled a byte at a time.
func TestConnectBytes(t *testing.T) {
	hello := captureHello(t, allowedHost)
	tests := []struct {
		name      string
		hello     []byte
		pipelined bool
		dribble   bool
		host      string // as the client writes it
	}{
		{name: "after the answer", hello: hello, host: allowedHost},
		{name: "pipelined", hello: hello, pipelined: true, host: allowedHost},
		{name: "split over records and reads", hello: records(hello[5:], 1, 2, 3, 100), dribble: true, host: allowedHost},
		{name: "uppercase and trailing dot", hello: hello, host: "ALLOWED.Test."},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			payload := bytes.Repeat([]byte("u"), 100_000)
			reply := bytes.Repeat([]byte("d"), 300_000)
			u := newRawUpstream(t, "tcp", "127.0.0.1:0", 0, reply)
			e := newEnv(t, nil)
			e.res.set(allowedHost, []netip.Addr{loopback4})
			port := strconv.Itoa(u.port())
			c := e.serve(t.Context(), sandbox(allowSet{allowedHost + ":" + port}))

			var br *bufio.Reader
			var resp *http.Response
			sent := append(append([]byte{}, tt.hello...), payload...)
			if tt.pipelined {
				br, resp = connect(t, c, tt.host+":"+port, sent)
			} else {
				br, resp = connect(t, c, tt.host+":"+port, nil)
				if tt.dribble {
					for _, b := range sent[:40] {
						if _, err := c.Write([]byte{b}); err != nil {
							t.Fatal(err)
						}
						time.Sleep(time.Millisecond)
					}
					sent = sent[40:]
				}
				if _, err := c.Write(sent); err != nil {
					t.Fatal(err)
				}
			}
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("CONNECT status = %d, want 200", resp.StatusCode)
			}
			if err := c.(*net.TCPConn).CloseWrite(); err != nil {
				t.Fatal(err)
			}
			got, err := io.ReadAll(br)
			if err != nil {
				t.Fatalf("reading the reply: %v", err)
			}
			if !bytes.Equal(got, reply) {
				t.Errorf("client got %d bytes, want the %d the upstream sent", len(got), len(reply))
			}
			want := append(append([]byte{}, tt.hello...), payload...)
			if b := u.received(t); !bytes.Equal(b, want) {
				t.Errorf("upstream got %d bytes, want the %d the client sent", len(b), len(want))
			}
			d := e.next()
			wantD := Decision{
				SandboxID: sandboxID, Method: "CONNECT", Host: allowedHost, Port: u.port(),
				Addr: addrPort(t, u.ln.Addr()), Allowed: true, Reason: "allowed",
				BytesUp: int64(len(want)), BytesDown: int64(len(reply)),
			}
			if diff := cmp.Diff(wantD, d, ignoreTiming); diff != "" {
				t.Errorf("decision (-want +got):\n%s", diff)
			}
		})
	}
}

// TestConnectOverPipe runs a tunnel over a conn that cannot half-close.
func TestConnectOverPipe(t *testing.T) {
	hello := captureHello(t, allowedHost)
	sent := append(append([]byte{}, hello...), "ping"...)
	u := newRawUpstream(t, "tcp", "127.0.0.1:0", len(sent), []byte("pong"))
	e := newEnv(t, nil)
	e.res.set(allowedHost, []netip.Addr{loopback4})
	port := strconv.Itoa(u.port())
	c := e.servePipe(t.Context(), sandbox(allowSet{allowedHost + ":" + port}))

	errc := make(chan error, 1)
	go func() {
		_, err := c.Write([]byte("CONNECT " + allowedHost + ":" + port + " HTTP/1.1\r\n\r\n"))
		if err == nil {
			_, err = c.Write(sent)
		}
		errc <- err
	}()
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, &http.Request{Method: http.MethodConnect})
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("CONNECT answer = %v, %v; want 200", resp, err)
	}
	if err := <-errc; err != nil {
		t.Fatalf("writing: %v", err)
	}
	got, _ := io.ReadAll(br)
	if string(got) != "pong" {
		t.Errorf("client got %q, want pong", got)
	}
	d := e.next()
	want := Decision{
		SandboxID: sandboxID, Method: "CONNECT", Host: allowedHost, Port: u.port(),
		Addr: addrPort(t, u.ln.Addr()), Allowed: true, Reason: "allowed",
		BytesUp: int64(len(sent)), BytesDown: 4,
	}
	if diff := cmp.Diff(want, d, ignoreTiming); diff != "" {
		t.Errorf("decision (-want +got):\n%s", diff)
	}
}

// TestConnectClientHelloRefused covers SECURITY D27 and D28: a tunnel to
// an allowed host carries only TLS for that host.
func TestConnectClientHelloRefused(t *testing.T) {
	tests := []struct {
		name   string
		send   []byte
		reason string
	}{
		{name: "other sni", send: captureHello(t, "other.test"), reason: "client hello: sni mismatch"},
		{name: "suffix sni", send: captureHello(t, "allowed.test.evil.test"), reason: "client hello: sni mismatch"},
		{name: "prefix sni", send: captureHello(t, "evilallowed.test"), reason: "client hello: sni mismatch"},
		{name: "no sni", send: captureHello(t, ""), reason: "client hello: no sni"},
		{name: "ech", send: records(helloMsg(sniExt(allowedHost), ext(extECH, []byte{0}))), reason: "client hello: encrypted client hello"},
		{name: "plain http", send: []byte("GET / HTTP/1.1\r\nHost: allowed.test\r\n\r\n"), reason: "client hello: not tls"},
		{name: "connect in the tunnel", send: []byte("CONNECT evil.test:443 HTTP/1.1\r\n\r\n"), reason: "client hello: not tls"},
		{name: "websocket in the tunnel", send: []byte("GET / HTTP/1.1\r\nUpgrade: websocket\r\n\r\n"), reason: "client hello: not tls"},
		{name: "h2c preface", send: []byte("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"), reason: "client hello: not tls"},
		{name: "closed mid hello", send: captureHello(t, allowedHost)[:50], reason: "client hello: connection closed"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			u := newRawUpstream(t, "tcp", "127.0.0.1:0", 0, nil)
			e := newEnv(t, nil)
			e.res.set(allowedHost, []netip.Addr{loopback4})
			port := strconv.Itoa(u.port())
			c := e.serve(t.Context(), sandbox(allowSet{allowedHost + ":" + port}))

			br, resp := connect(t, c, allowedHost+":"+port, tt.send)
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("CONNECT status = %d, want 200", resp.StatusCode)
			}
			if tt.reason == "client hello: connection closed" {
				_ = c.(*net.TCPConn).CloseWrite()
			}
			expectClosed(t, br, c)
			if b := u.received(t); len(b) != 0 {
				t.Errorf("upstream got %q, want nothing", b)
			}
			want := Decision{
				SandboxID: sandboxID, Method: "CONNECT", Host: allowedHost, Port: u.port(),
				Addr: addrPort(t, u.ln.Addr()), Reason: tt.reason,
			}
			if diff := cmp.Diff(want, e.next(), ignoreTiming); diff != "" {
				t.Errorf("decision (-want +got):\n%s", diff)
			}
		})
	}
}

func TestConnectHelloTimeout(t *testing.T) {
	u := newRawUpstream(t, "tcp", "127.0.0.1:0", 0, nil)
	e := newEnv(t, func(o *Options) { o.HeaderTimeout = 200 * time.Millisecond })
	e.res.set(allowedHost, []netip.Addr{loopback4})
	port := strconv.Itoa(u.port())
	c := e.serve(t.Context(), sandbox(allowSet{allowedHost + ":" + port}))

	br, resp := connect(t, c, allowedHost+":"+port, []byte{recordHandshake, 3})
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("CONNECT status = %d, want 200", resp.StatusCode)
	}
	expectClosed(t, br, c)
	if d := e.next(); d.Reason != "client hello: timeout" || d.Allowed {
		t.Errorf("decision = %+v, want a timeout denial", d)
	}
}

// TestConnectDenied covers targets refused before anything is dialed:
// SECURITY D24, D25 and D26.
func TestConnectDenied(t *testing.T) {
	allowed := allowSet{
		"allowed.test:443", "loop.test:443", "loop6.test:443", "meta.test:443",
		"mapped.test:443", "nat64.test:443", "mixed.test:443", "nx.test:443",
		"public.test:443",
	}
	answers := map[string][]netip.Addr{
		"loop.test":   {loopback4},
		"loop6.test":  {loopback6},
		"meta.test":   {netip.MustParseAddr("169.254.169.254")},
		"mapped.test": {netip.MustParseAddr("::ffff:127.0.0.1")},
		"nat64.test":  {netip.MustParseAddr("64:ff9b::a9fe:a9fe")},
		"mixed.test":  {loopback4, netip.MustParseAddr("10.0.0.1")},
		"public.test": {netip.MustParseAddr("192.0.2.1")},
	}
	tests := []struct {
		target    string
		allowAddr func(netip.Addr) bool
		status    int
		want      Decision
		resolves  bool
	}{
		{target: "evil.test:443", status: 403, want: Decision{Host: "evil.test", Port: 443, Reason: "not in allowlist"}},
		{target: "allowed.test.evil.test:443", status: 403, want: Decision{Host: "allowed.test.evil.test", Port: 443, Reason: "not in allowlist"}},
		{target: "evilallowed.test:443", status: 403, want: Decision{Host: "evilallowed.test", Port: 443, Reason: "not in allowlist"}},
		{target: "allowed.test.:8443", status: 403, want: Decision{Host: "allowed.test", Port: 8443, Reason: "not in allowlist"}},
		{target: "allowed.test", status: 400, want: Decision{Host: "allowed.test", Reason: "invalid port"}},
		{target: "allowed.test:", status: 400, want: Decision{Host: "allowed.test", Reason: "invalid port"}},
		{target: "allowed.test:0", status: 400, want: Decision{Host: "allowed.test", Reason: "invalid port"}},
		{target: "allowed.test:65536", status: 400, want: Decision{Host: "allowed.test", Reason: "invalid port"}},
		// net/http's parser refuses this port before the proxy sees it.
		{target: "allowed.test:443x", status: 400, want: Decision{Reason: "malformed request"}},
		{target: "user@allowed.test:443", status: 403, want: Decision{Host: `"user@allowed.test:443"`, Reason: "userinfo in target"}},
		{target: "allowed.test:443@evil.test:443", status: 403, want: Decision{Host: `"allowed.test:443@evil.test:443"`, Reason: "userinfo in target"}},
		{target: "allowed_test:443", status: 400, want: Decision{Host: `"allowed_test"`, Reason: "invalid host"}},
		{target: "xn--allowed-.test:443", status: 400, want: Decision{Host: `"xn--allowed-.test"`, Reason: "invalid host"}},
		{target: "allowed.test%00:443", status: 400, want: Decision{Reason: "malformed request"}},
		{target: "nx.test:443", status: 502, want: Decision{Host: "nx.test", Port: 443, Reason: "dns lookup failed"}, resolves: true},
		{target: "loop.test:443", status: 403, want: Decision{Host: "loop.test", Port: 443, Reason: "forbidden address 127.0.0.1 (loopback)"}, resolves: true},
		{target: "loop6.test:443", status: 403, want: Decision{Host: "loop6.test", Port: 443, Reason: "forbidden address ::1 (loopback)"}, resolves: true},
		{target: "meta.test:443", status: 403, want: Decision{Host: "meta.test", Port: 443, Reason: "forbidden address 169.254.169.254 (metadata)"}, resolves: true},
		{target: "mapped.test:443", status: 403, want: Decision{Host: "mapped.test", Port: 443, Reason: "forbidden address 127.0.0.1 (loopback)"}, resolves: true},
		{target: "nat64.test:443", status: 403, want: Decision{Host: "nat64.test", Port: 443, Reason: "forbidden address 64:ff9b::a9fe:a9fe (nat64 metadata)"}, resolves: true},
		{target: "public.test:443", status: 403, want: Decision{Host: "public.test", Port: 443, Reason: "forbidden address 192.0.2.1 (documentation)"}, resolves: true},
		// Loopback is let through here; the private address beside it
		// still refuses the name.
		{target: "mixed.test:443", allowAddr: onlyLoopback4, status: 403, want: Decision{Host: "mixed.test", Port: 443, Reason: "forbidden address 10.0.0.1 (not allowed)"}, resolves: true},
	}
	for _, tt := range tests {
		t.Run(tt.target, func(t *testing.T) {
			e := newEnv(t, func(o *Options) { o.AllowAddr = tt.allowAddr })
			for h, a := range answers {
				e.res.set(h, a)
			}
			c := e.serve(t.Context(), sandbox(allowed))
			br, resp := connect(t, c, tt.target, nil)
			if resp.StatusCode != tt.status {
				t.Errorf("status = %d, want %d", resp.StatusCode, tt.status)
			}
			if body := readBody(t, resp); body != tt.want.Reason+"\n" {
				t.Errorf("body = %q, want the reason", body)
			}
			expectClosed(t, br, c)
			want := tt.want
			want.SandboxID, want.Method = sandboxID, "CONNECT"
			if want.Reason == "malformed request" {
				want.Method = ""
			}
			if diff := cmp.Diff(want, e.next(), ignoreTiming); diff != "" {
				t.Errorf("decision (-want +got):\n%s", diff)
			}
			// SECURITY D23: a name that is not allowed is never looked up.
			var wantLookups []string
			if tt.resolves {
				wantLookups = []string{want.Host}
			}
			if diff := cmp.Diff(wantLookups, e.res.lookups()); diff != "" {
				t.Errorf("lookups (-want +got):\n%s", diff)
			}
		})
	}
}

// TestConnectIPLiterals tries every spelling of the metadata and loopback
// addresses as a target (SECURITY D24, D25), with an allowlist that allows
// everything: the refusal must come from the proxy itself.
func TestConnectIPLiterals(t *testing.T) {
	hosts := []string{
		"127.0.0.1", "127.0.0.1.", "127.1", "127.0.1", "2130706433", "0177.0.0.1", "0177.1",
		"0x7f.0.0.1", "0x7F.1", "0x7f000001", "017700000001", "0x7f.0x0.0x0.0x1",
		"[::1]", "[0:0:0:0:0:0:0:1]", "[::ffff:127.0.0.1]", "[::ffff:7f00:1]", "[::127.0.0.1]",
		"[64:ff9b::127.0.0.1]", "[fe80::1%25eth0]",
		"169.254.169.254", "2852039166", "0251.0376.0251.0376", "0xa9.0xfe.0xa9.0xfe",
		"0xa9fea9fe", "169.254.43518", "169.16689662", "0251.254.169.254", "025177524776",
		"[::ffff:169.254.169.254]", "[::ffff:a9fe:a9fe]", "[fd00:ec2::254]", "[64:ff9b::a9fe:a9fe]",
		"0.0.0.0", "0", "[::]",
	}
	for _, h := range hosts {
		t.Run(h, func(t *testing.T) {
			e := newEnv(t, func(o *Options) { o.AllowAddr = nil })
			c := e.serve(t.Context(), sandbox(allowAll{}))
			br, resp := connect(t, c, h+":443", nil)
			if resp.StatusCode != http.StatusForbidden {
				t.Errorf("status = %d, want 403", resp.StatusCode)
			}
			readBody(t, resp)
			expectClosed(t, br, c)
			want := Decision{SandboxID: sandboxID, Method: "CONNECT", Host: quoteRaw(h), Reason: "ip literal target"}
			if diff := cmp.Diff(want, e.next(), ignoreTiming); diff != "" {
				t.Errorf("decision (-want +got):\n%s", diff)
			}
			if l := e.res.lookups(); len(l) != 0 {
				t.Errorf("resolver asked for %q", l)
			}
		})
	}
	// Spellings that map to the same addresses only under Unicode rules
	// are refused too, as names that are not ASCII.
	for _, h := range []string{"１２７.０.０.１", "127。0。0。1", "①②⑦.0.0.1"} {
		t.Run(h, func(t *testing.T) {
			e := newEnv(t, func(o *Options) { o.AllowAddr = nil })
			c := e.serve(t.Context(), sandbox(allowAll{}))
			br, resp := connect(t, c, h+":443", nil)
			if resp.StatusCode/100 != 4 {
				t.Errorf("status = %d, want a refusal", resp.StatusCode)
			}
			readBody(t, resp)
			expectClosed(t, br, c)
			if d := e.next(); d.Allowed || len(e.res.lookups()) != 0 {
				t.Errorf("decision %+v after lookups %q, want a refusal without any", d, e.res.lookups())
			}
		})
	}
}

// TestDialsCheckedAddress makes the resolver change its answer between
// lookups: the connection must go to the address that was checked, and
// the name must be looked up once.
func TestDialsCheckedAddress(t *testing.T) {
	hello := captureHello(t, allowedHost)
	v4 := newRawUpstream(t, "tcp", "127.0.0.1:0", len(hello), nil)
	port := strconv.Itoa(v4.port())
	v6ln, err := net.Listen("tcp", "[::1]:"+port)
	if err != nil {
		skip.OrFail(t, fmt.Sprintf("no ::1 listener on port %s: %v", port, err))
	}
	v6ln.Close()
	v6 := newRawUpstream(t, "tcp", "[::1]:"+port, len(hello), nil)

	for _, tt := range []struct {
		name    string
		answers [][]netip.Addr
		want    *rawUpstream
	}{
		{name: "v4 then v6", answers: [][]netip.Addr{{loopback4}, {loopback6}}, want: v4},
		{name: "v6 then v4", answers: [][]netip.Addr{{loopback6}, {loopback4}}, want: v6},
	} {
		t.Run(tt.name, func(t *testing.T) {
			allowAddr := func(a netip.Addr) bool { return a == tt.answers[0][0] }
			e := newEnv(t, func(o *Options) { o.AllowAddr = allowAddr })
			e.res.set(allowedHost, tt.answers...)
			c := e.serve(t.Context(), sandbox(allowSet{allowedHost + ":" + port}))
			br, resp := connect(t, c, allowedHost+":"+port, hello)
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("CONNECT status = %d, want 200", resp.StatusCode)
			}
			// The upstream closes after the hello; the client then does.
			expectClosed(t, br, c)
			c.Close()
			if got := tt.want.received(t); !bytes.Equal(got, hello) {
				t.Errorf("checked upstream got %d bytes, want the hello", len(got))
			}
			for _, other := range []*rawUpstream{v4, v6} {
				if other != tt.want {
					other.untouched(t)
				}
			}
			if d := e.next(); d.Addr.Addr() != tt.answers[0][0] || !d.Allowed {
				t.Errorf("decision %+v, want allowed to %s", d, tt.answers[0][0])
			}
			if diff := cmp.Diff([]string{allowedHost}, e.res.lookups()); diff != "" {
				t.Errorf("lookups (-want +got):\n%s", diff)
			}
		})
	}
}

// TestContextEndsTunnel checks that cancelling ServeConn's context cuts a
// tunnel that neither side would end.
func TestContextEndsTunnel(t *testing.T) {
	u := newRawUpstream(t, "tcp", "127.0.0.1:0", 0, nil)
	e := newEnv(t, nil)
	e.res.set(allowedHost, []netip.Addr{loopback4})
	port := strconv.Itoa(u.port())
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	c := e.serve(ctx, sandbox(allowSet{allowedHost + ":" + port}))
	hello := captureHello(t, allowedHost)
	br, resp := connect(t, c, allowedHost+":"+port, hello)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("CONNECT status = %d, want 200", resp.StatusCode)
	}
	// The hello must have crossed before the cut, or it could be a hello
	// failure that ends the tunnel.
	select {
	case <-u.first:
	case <-time.After(10 * time.Second):
		t.Fatal("the hello never reached the upstream")
	}
	cancel()
	expectClosed(t, br, c)
	if got := u.received(t); !bytes.Equal(got, hello) {
		t.Errorf("upstream got %d bytes, want the hello", len(got))
	}
	if d := e.next(); !d.Allowed || d.BytesUp != int64(len(hello)) {
		t.Errorf("decision %+v, want allowed with the hello's bytes up", d)
	}
}

func TestConnectIdleTimeout(t *testing.T) {
	u := newRawUpstream(t, "tcp", "127.0.0.1:0", 0, nil)
	e := newEnv(t, func(o *Options) { o.IdleTimeout = 300 * time.Millisecond })
	e.res.set(allowedHost, []netip.Addr{loopback4})
	port := strconv.Itoa(u.port())
	c := e.serve(t.Context(), sandbox(allowSet{allowedHost + ":" + port}))
	br, resp := connect(t, c, allowedHost+":"+port, captureHello(t, allowedHost))
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("CONNECT status = %d, want 200", resp.StatusCode)
	}
	// Keep one direction busy for longer than the idle timeout: the
	// tunnel must survive it.
	for range 10 {
		time.Sleep(50 * time.Millisecond)
		if _, err := c.Write([]byte("x")); err != nil {
			t.Fatalf("tunnel cut while busy: %v", err)
		}
	}
	expectClosed(t, br, c)
	if d := e.next(); !d.Allowed || !strings.HasPrefix(d.Reason, "allowed") {
		t.Errorf("decision %+v, want allowed", d)
	}
}

func TestConnectNilAllowlist(t *testing.T) {
	e := newEnv(t, nil)
	e.res.set(allowedHost, []netip.Addr{loopback4})
	c := e.serve(t.Context(), Sandbox{ID: sandboxID})
	br, resp := connect(t, c, allowedHost+":443", nil)
	if resp.StatusCode != http.StatusForbidden {
		t.Errorf("status = %d, want 403", resp.StatusCode)
	}
	readBody(t, resp)
	expectClosed(t, br, c)
	want := Decision{SandboxID: sandboxID, Method: "CONNECT", Host: allowedHost, Port: 443, Reason: "not in allowlist"}
	if diff := cmp.Diff(want, e.next(), ignoreTiming); diff != "" {
		t.Errorf("decision (-want +got):\n%s", diff)
	}
	if l := e.res.lookups(); len(l) != 0 {
		t.Errorf("resolver asked for %q", l)
	}
}

func TestConnectDialFails(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := addrPort(t, ln.Addr())
	ln.Close()
	e := newEnv(t, nil)
	e.res.set(allowedHost, []netip.Addr{loopback4})
	target := allowedHost + ":" + strconv.Itoa(int(closed.Port()))
	c := e.serve(t.Context(), sandbox(allowSet{target}))
	br, resp := connect(t, c, target, nil)
	if resp.StatusCode != http.StatusBadGateway {
		t.Errorf("status = %d, want 502", resp.StatusCode)
	}
	readBody(t, resp)
	expectClosed(t, br, c)
	want := Decision{SandboxID: sandboxID, Method: "CONNECT", Host: allowedHost, Port: int(closed.Port()), Addr: closed, Reason: "dial failed"}
	if diff := cmp.Diff(want, e.next(), ignoreTiming); diff != "" {
		t.Errorf("decision (-want +got):\n%s", diff)
	}
}
