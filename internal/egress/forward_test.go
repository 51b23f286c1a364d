package egress

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/agentbox/agentbox/internal/guest"
	"github.com/agentbox/agentbox/internal/testutil/skip"
)

// seen is what an HTTP upstream received.
type seen struct {
	Method, Host, URI string
	Header            http.Header
	BodyLen           int
}

// httpUpstream is an HTTP server that records each request and answers
// with reply.
type httpUpstream struct {
	*httptest.Server
	mu  sync.Mutex
	got []seen
}

func newHTTPUpstream(t *testing.T, ln net.Listener, reply []byte) *httpUpstream {
	t.Helper()
	u := &httpUpstream{}
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n, _ := io.Copy(io.Discard, r.Body)
		u.mu.Lock()
		u.got = append(u.got, seen{Method: r.Method, Host: r.Host, URI: r.RequestURI, Header: r.Header, BodyLen: int(n)})
		u.mu.Unlock()
		w.Header().Set("Proxy-Authenticate", "Basic")
		if r.Method == http.MethodHead {
			w.Header().Set("Content-Length", strconv.Itoa(len(reply)))
		}
		w.Header().Set("X-Upstream", "yes")
		_, _ = w.Write(reply)
	})
	if ln == nil {
		u.Server = httptest.NewServer(h)
	} else {
		u.Server = httptest.NewUnstartedServer(h)
		u.Listener.Close()
		u.Listener = ln
		u.Start()
	}
	t.Cleanup(u.Close)
	return u
}

func (u *httpUpstream) requests() []seen {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([]seen(nil), u.got...)
}

func (u *httpUpstream) port() int { return u.Listener.Addr().(*net.TCPAddr).Port }

// roundTrip writes a raw request and reads the answer.
func roundTrip(t *testing.T, c net.Conn, br *bufio.Reader, raw, method string) *http.Response {
	t.Helper()
	if _, err := io.WriteString(c, raw); err != nil {
		t.Fatalf("writing request: %v", err)
	}
	resp, err := http.ReadResponse(br, &http.Request{Method: method})
	if err != nil {
		t.Fatalf("reading response: %v", err)
	}
	return resp
}

func TestForwardHTTP(t *testing.T) {
	reply := bytes.Repeat([]byte("r"), 300_000)
	body := strings.Repeat("b", 100_000)
	chunked := "4\r\nabcd\r\n6\r\nefghij\r\n0\r\n\r\n"
	tests := []struct {
		name     string
		req      string // %[1]s is host:port
		method   string
		wantSeen seen
		wantUp   int64
		wantDown int64
	}{
		{
			name: "proxy headers are stripped",
			req: "GET http://%[1]s/p/a%%2Fb?q=1 HTTP/1.1\r\nHost: ignored.test\r\n" +
				"Proxy-Authorization: Basic c2VjcmV0\r\nProxy-Connection: keep-alive\r\nProxy-Foo: x\r\n" +
				"Connection: X-Hop\r\nX-Hop: 1\r\nKeep-Alive: 300\r\nTE: trailers\r\n" +
				"X-Keep: 2\r\nUser-Agent: curl/8\r\n\r\n",
			method: "GET",
			wantSeen: seen{Method: "GET", URI: "/p/a%2Fb?q=1", Header: http.Header{
				"X-Keep": {"2"}, "User-Agent": {"curl/8"}, "Connection": {"close"},
			}},
			wantDown: int64(len(reply)),
		},
		{
			name:     "no user agent is added",
			req:      "GET http://%[1]s/ HTTP/1.1\r\n\r\n",
			method:   "GET",
			wantSeen: seen{Method: "GET", URI: "/", Header: http.Header{"Connection": {"close"}}},
			wantDown: int64(len(reply)),
		},
		{
			name:   "body",
			req:    "POST http://%[1]s/up HTTP/1.1\r\nContent-Length: 100000\r\nContent-Type: text/plain\r\n\r\n" + body,
			method: "POST",
			wantSeen: seen{Method: "POST", URI: "/up", BodyLen: len(body), Header: http.Header{
				"Content-Length": {"100000"}, "Content-Type": {"text/plain"}, "Connection": {"close"},
			}},
			wantUp:   int64(len(body)),
			wantDown: int64(len(reply)),
		},
		{
			name:   "chunked body",
			req:    "PUT http://%[1]s/up HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n" + chunked,
			method: "PUT",
			wantSeen: seen{Method: "PUT", URI: "/up", BodyLen: 10, Header: http.Header{
				"Connection": {"close"},
			}},
			wantUp:   10,
			wantDown: int64(len(reply)),
		},
		{
			name:     "head",
			req:      "HEAD http://%[1]s/ HTTP/1.1\r\n\r\n",
			method:   "HEAD",
			wantSeen: seen{Method: "HEAD", URI: "/", Header: http.Header{"Connection": {"close"}}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			u := newHTTPUpstream(t, nil, reply)
			e := newEnv(t, nil)
			e.res.set(allowedHost, []netip.Addr{loopback4})
			target := net.JoinHostPort(allowedHost, strconv.Itoa(u.port()))
			c := e.serve(t.Context(), sandbox(allowSet{target}))
			br := bufio.NewReader(c)

			resp := roundTrip(t, c, br, fmt.Sprintf(tt.req, target), tt.method)
			got, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != 200 || (tt.method != "HEAD" && !bytes.Equal(got, reply)) {
				t.Errorf("response %d with %d bytes, want 200 with %d", resp.StatusCode, len(got), len(reply))
			}
			if tt.method == "HEAD" && resp.ContentLength != int64(len(reply)) {
				t.Errorf("HEAD Content-Length = %d, want %d", resp.ContentLength, len(reply))
			}
			if v := resp.Header.Get("Proxy-Authenticate"); v != "" {
				t.Errorf("response header Proxy-Authenticate: %s reached the client", v)
			}
			if resp.Header.Get("X-Upstream") != "yes" {
				t.Error("end-to-end response header X-Upstream lost")
			}

			want := tt.wantSeen
			want.Host = target
			if diff := cmp.Diff([]seen{want}, u.requests()); diff != "" {
				t.Errorf("upstream saw (-want +got):\n%s", diff)
			}
			wantD := Decision{
				SandboxID: sandboxID, Method: tt.method, Host: allowedHost, Port: u.port(),
				Addr: addrPort(t, u.Listener.Addr()), Allowed: true, Reason: "allowed",
				BytesUp: tt.wantUp, BytesDown: tt.wantDown,
			}
			if diff := cmp.Diff(wantD, e.next(), ignoreTiming); diff != "" {
				t.Errorf("decision (-want +got):\n%s", diff)
			}
		})
	}
}

func TestCleanHeader(t *testing.T) {
	in := http.Header{
		"Connection":          {"X-Hop, close", "X-Other"},
		"X-Hop":               {"1"},
		"X-Other":             {"1"},
		"Keep-Alive":          {"300"},
		"Proxy-Connection":    {"keep-alive"},
		"Proxy-Authorization": {"Basic c2VjcmV0"},
		"Proxy-Authenticate":  {"Basic"},
		"Te":                  {"trailers"},
		"Trailer":             {"X-T"},
		"Transfer-Encoding":   {"chunked"},
		"Upgrade":             {"h2c"},
		"Expect":              {"100-continue"},
		"X-Keep":              {"1"},
		"Authorization":       {"Bearer end-to-end"},
	}
	want := http.Header{"X-Keep": {"1"}, "Authorization": {"Bearer end-to-end"}}
	if diff := cmp.Diff(want, cleanHeader(in)); diff != "" {
		t.Errorf("cleanHeader() (-want +got):\n%s", diff)
	}
	if len(in) != 14 {
		t.Error("cleanHeader() changed its input")
	}
}

func TestForwardCanonicalHost(t *testing.T) {
	u := newHTTPUpstream(t, nil, []byte("ok"))
	e := newEnv(t, nil)
	e.res.set(allowedHost, []netip.Addr{loopback4})
	port := strconv.Itoa(u.port())
	c := e.serve(t.Context(), sandbox(allowSet{allowedHost + ":" + port}))
	resp := roundTrip(t, c, bufio.NewReader(c), "GET http://ALLOWED.Test.:"+port+"/x HTTP/1.1\r\nHost: evil.test\r\n\r\n", "GET")
	readBody(t, resp)
	if resp.StatusCode != 200 {
		t.Fatalf("status = %d, want 200", resp.StatusCode)
	}
	if got := u.requests(); len(got) != 1 || got[0].Host != allowedHost+":"+port {
		t.Errorf("upstream saw %+v, want Host %s:%s", got, allowedHost, port)
	}
	if d := e.next(); d.Host != allowedHost || !d.Allowed {
		t.Errorf("decision %+v, want allowed for %s", d, allowedHost)
	}
}

func TestForwardExpectContinue(t *testing.T) {
	u := newHTTPUpstream(t, nil, []byte("ok"))
	e := newEnv(t, nil)
	e.res.set(allowedHost, []netip.Addr{loopback4})
	target := allowedHost + ":" + strconv.Itoa(u.port())
	c := e.serve(t.Context(), sandbox(allowSet{target}))
	br := bufio.NewReader(c)
	if _, err := io.WriteString(c, "POST http://"+target+"/ HTTP/1.1\r\nContent-Length: 5\r\nExpect: 100-continue\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	cont, err := http.ReadResponse(br, nil)
	if err != nil || cont.StatusCode != http.StatusContinue {
		t.Fatalf("first answer %v, %v; want 100 Continue", cont, err)
	}
	if _, err := io.WriteString(c, "hello"); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("answer %v, %v; want 200", resp, err)
	}
	readBody(t, resp)
	if got := u.requests(); len(got) != 1 || got[0].BodyLen != 5 || got[0].Header.Get("Expect") != "" {
		t.Errorf("upstream saw %+v, want the 5-byte body without Expect", got)
	}
	if d := e.next(); d.BytesUp != 5 || !d.Allowed {
		t.Errorf("decision %+v, want allowed with 5 bytes up", d)
	}
}

// TestForwardRefused covers requests refused before any upstream is
// reached (SECURITY D26, D28).
func TestForwardRefused(t *testing.T) {
	tests := []struct {
		name   string
		req    string // %[1]s is allowed.test:port, %[2]s the port
		method string
		status int
		want   Decision // SandboxID, Method and, with port, Port filled in
		port   bool
		keep   bool
	}{
		{name: "not allowed", req: "GET http://evil.test:%[2]s/ HTTP/1.1\r\n\r\n", status: 403,
			want: Decision{Host: "evil.test", Reason: "not in allowlist"}, port: true, keep: true},
		{name: "suffix", req: "GET http://allowed.test.evil.test:%[2]s/ HTTP/1.1\r\n\r\n", status: 403,
			want: Decision{Host: "allowed.test.evil.test", Reason: "not in allowlist"}, port: true, keep: true},
		{name: "default port not allowed", req: "GET http://allowed.test/ HTTP/1.1\r\n\r\n", status: 403,
			want: Decision{Host: "allowed.test", Port: 80, Reason: "not in allowlist"}, keep: true},
		{name: "userinfo before allowed", req: "GET http://evil.test@%[1]s/ HTTP/1.1\r\n\r\n", status: 403,
			want: Decision{Host: "allowed.test", Reason: "userinfo in target"}, keep: true},
		{name: "allowed as userinfo", req: "GET http://%[1]s@evil.test/ HTTP/1.1\r\n\r\n", status: 403,
			want: Decision{Host: "evil.test", Reason: "userinfo in target"}, keep: true},
		{name: "fragment", req: "GET http://%[1]s/#@evil.test HTTP/1.1\r\n\r\n", status: 400,
			want: Decision{Host: "allowed.test", Reason: "invalid target"}, keep: true},
		{name: "ip literal", req: "GET http://127.0.0.1:%[2]s/ HTTP/1.1\r\n\r\n", status: 403,
			want: Decision{Host: `"127.0.0.1"`, Reason: "ip literal target"}, keep: true},
		{name: "decimal ip literal", req: "GET http://2130706433:%[2]s/ HTTP/1.1\r\n\r\n", status: 403,
			want: Decision{Host: `"2130706433"`, Reason: "ip literal target"}, keep: true},
		{name: "ipv6 literal", req: "GET http://[::ffff:169.254.169.254]:%[2]s/ HTTP/1.1\r\n\r\n", status: 403,
			want: Decision{Host: `"[::ffff:169.254.169.254]"`, Reason: "ip literal target"}, keep: true},
		{name: "h2c upgrade", status: 403, keep: true,
			req:  "GET http://%[1]s/ HTTP/1.1\r\nConnection: Upgrade, HTTP2-Settings\r\nUpgrade: h2c\r\nHTTP2-Settings: AAMAAABkAAQAAP__\r\n\r\n",
			want: Decision{Host: "allowed.test", Reason: "protocol upgrade not allowed"}},
		{name: "websocket upgrade", status: 403, keep: true,
			req:  "GET http://%[1]s/ HTTP/1.1\r\nConnection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n",
			want: Decision{Host: "allowed.test", Reason: "protocol upgrade not allowed"}},
		{name: "http2-settings alone", status: 403, keep: true,
			req:  "GET http://%[1]s/ HTTP/1.1\r\nHTTP2-Settings: AAMAAABkAAQAAP__\r\n\r\n",
			want: Decision{Host: "allowed.test", Reason: "protocol upgrade not allowed"}},
		{name: "origin form", req: "GET /path HTTP/1.1\r\nHost: %[1]s\r\n\r\n", status: 400,
			want: Decision{Reason: "origin-form request: use an absolute http:// URL or CONNECT"}, keep: true},
		{name: "asterisk form", req: "OPTIONS * HTTP/1.1\r\nHost: %[1]s\r\n\r\n", method: "OPTIONS", status: 400,
			want: Decision{Reason: "origin-form request: use an absolute http:// URL or CONNECT"}, keep: true},
		{name: "https absolute form", req: "GET https://%[1]s/ HTTP/1.1\r\n\r\n", status: 400,
			want: Decision{Host: "allowed.test", Reason: "unsupported scheme"}, keep: true},
		{name: "ws scheme", req: "GET ws://%[1]s/ HTTP/1.1\r\n\r\n", status: 400,
			want: Decision{Host: "allowed.test", Reason: "unsupported scheme"}, keep: true},
		{name: "unknown method", req: "FOO http://%[1]s/ HTTP/1.1\r\n\r\n", method: "FOO", status: 405,
			want: Decision{Host: "allowed.test", Reason: "method not allowed"}, keep: true},
		{name: "trace", req: "TRACE http://%[1]s/ HTTP/1.1\r\n\r\n", method: "TRACE", status: 405,
			want: Decision{Host: "allowed.test", Reason: "method not allowed"}, keep: true},
		{name: "h2c preface", req: "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", method: "PRI", status: 505,
			want: Decision{Reason: "unsupported http version"}},
		{name: "refused with a body closes", req: "POST http://evil.test:%[2]s/ HTTP/1.1\r\nContent-Length: 3\r\n\r\nabc", method: "POST", status: 403,
			want: Decision{Host: "evil.test", Reason: "not in allowlist"}, port: true},
		{name: "connection close", req: "GET http://evil.test:%[2]s/ HTTP/1.1\r\nConnection: close\r\n\r\n", status: 403,
			want: Decision{Host: "evil.test", Reason: "not in allowlist"}, port: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			u := newHTTPUpstream(t, nil, []byte("ok"))
			e := newEnv(t, nil)
			e.res.set(allowedHost, []netip.Addr{loopback4})
			port := strconv.Itoa(u.port())
			target := allowedHost + ":" + port
			c := e.serve(t.Context(), sandbox(allowSet{target}))
			br := bufio.NewReader(c)
			method := tt.method
			if method == "" {
				method = "GET"
			}
			resp := roundTrip(t, c, br, fmt.Sprintf(tt.req, target, port), method)
			if resp.StatusCode != tt.status {
				t.Errorf("status = %d, want %d", resp.StatusCode, tt.status)
			}
			if body := readBody(t, resp); body != tt.want.Reason+"\n" {
				t.Errorf("body = %q, want the reason", body)
			}
			if resp.Close == tt.keep {
				t.Errorf("connection close = %v, want %v", resp.Close, !tt.keep)
			}
			want := tt.want
			want.SandboxID, want.Method = sandboxID, method
			if tt.port {
				want.Port = u.port()
			}
			if diff := cmp.Diff(want, e.next(), ignoreTiming); diff != "" {
				t.Errorf("decision (-want +got):\n%s", diff)
			}
			if got := u.requests(); len(got) != 0 {
				t.Errorf("upstream saw %+v, want nothing", got)
			}
		})
	}
}

// TestKeepAlive checks every request of a connection on its own.
func TestKeepAlive(t *testing.T) {
	u := newHTTPUpstream(t, nil, []byte("ok"))
	e := newEnv(t, nil)
	e.res.set(allowedHost, []netip.Addr{loopback4})
	port := strconv.Itoa(u.port())
	target := allowedHost + ":" + port
	c := e.serve(t.Context(), sandbox(allowSet{target}))
	br := bufio.NewReader(c)

	for i, tt := range []struct {
		req    string
		status int
	}{
		{"GET http://" + target + "/1 HTTP/1.1\r\n\r\n", 200},
		{"GET http://evil.test:" + port + "/2 HTTP/1.1\r\n\r\n", 403},
		{"POST http://" + target + "/3 HTTP/1.1\r\nContent-Length: 3\r\n\r\nabc", 200},
	} {
		resp := roundTrip(t, c, br, tt.req, "GET")
		readBody(t, resp)
		if resp.StatusCode != tt.status || resp.Close {
			t.Errorf("request %d: status %d, close %v; want %d and keep-alive", i, resp.StatusCode, resp.Close, tt.status)
		}
	}
	addr := addrPort(t, u.Listener.Addr())
	want := []Decision{
		{SandboxID: sandboxID, Method: "GET", Host: allowedHost, Port: u.port(), Addr: addr, Allowed: true, Reason: "allowed", BytesDown: 2},
		{SandboxID: sandboxID, Method: "GET", Host: "evil.test", Port: u.port(), Reason: "not in allowlist"},
		{SandboxID: sandboxID, Method: "POST", Host: allowedHost, Port: u.port(), Addr: addr, Allowed: true, Reason: "allowed", BytesUp: 3, BytesDown: 2},
	}
	got := []Decision{e.next(), e.next(), e.next()}
	if diff := cmp.Diff(want, got, ignoreTiming); diff != "" {
		t.Errorf("decisions (-want +got):\n%s", diff)
	}
	// A CONNECT ends the HTTP phase: what follows a refused one is not
	// read as a request.
	resp := roundTrip(t, c, br, "CONNECT evil.test:443 HTTP/1.1\r\n\r\nGET http://"+target+"/4 HTTP/1.1\r\n\r\n", "CONNECT")
	readBody(t, resp)
	expectClosed(t, br, c)
	if d := e.next(); d.Method != "CONNECT" || d.Allowed {
		t.Errorf("decision %+v, want a refused CONNECT", d)
	}
	e.noMore()
	if n := len(u.requests()); n != 2 {
		t.Errorf("upstream saw %d requests, want 2", n)
	}
}

// TestForwardDialsCheckedAddress: the resolver answers 127.0.0.1 and then
// ::1, upstreams listen on both; only the checked one may be reached, and
// the second request on the connection is checked afresh.
func TestForwardDialsCheckedAddress(t *testing.T) {
	v4 := newHTTPUpstream(t, nil, []byte("v4"))
	port := strconv.Itoa(v4.port())
	ln, err := net.Listen("tcp", "[::1]:"+port)
	if err != nil {
		skip.OrFail(t, fmt.Sprintf("no ::1 listener on port %s: %v", port, err))
	}
	v6 := newHTTPUpstream(t, ln, []byte("v6"))
	e := newEnv(t, nil)
	e.res.set(allowedHost, []netip.Addr{loopback4}, []netip.Addr{loopback6})
	target := allowedHost + ":" + port
	c := e.serve(t.Context(), sandbox(allowSet{target}))
	br := bufio.NewReader(c)

	resp := roundTrip(t, c, br, "GET http://"+target+"/ HTTP/1.1\r\n\r\n", "GET")
	if body := readBody(t, resp); body != "v4" {
		t.Errorf("first answer %q, want v4", body)
	}
	resp = roundTrip(t, c, br, "GET http://"+target+"/ HTTP/1.1\r\n\r\n", "GET")
	readBody(t, resp)
	if resp.StatusCode != http.StatusForbidden {
		t.Errorf("second status %d, want 403 for ::1", resp.StatusCode)
	}
	if d := e.next(); d.Addr != addrPort(t, v4.Listener.Addr()) {
		t.Errorf("first decision %+v, want %s dialed", d, v4.Listener.Addr())
	}
	if d := e.next(); d.Reason != "forbidden address ::1 (not allowed)" {
		t.Errorf("second decision %+v, want ::1 refused", d)
	}
	if n, n6 := len(v4.requests()), len(v6.requests()); n != 1 || n6 != 0 {
		t.Errorf("v4 saw %d requests and v6 %d, want 1 and 0", n, n6)
	}
	if diff := cmp.Diff([]string{allowedHost, allowedHost}, e.res.lookups()); diff != "" {
		t.Errorf("lookups (-want +got):\n%s", diff)
	}
}

func TestHeaderTooLarge(t *testing.T) {
	e := newEnv(t, nil)
	c := e.serve(t.Context(), sandbox(allowAll{}))
	errc := make(chan error, 1)
	go func() {
		_, err := io.WriteString(c, "GET http://allowed.test/ HTTP/1.1\r\nX-Big: "+strings.Repeat("a", 100<<10)+"\r\n\r\n")
		errc <- err
	}()
	// The proxy may reset the connection before the 431 is read; the
	// decision is what must not be missed.
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	if resp, err := http.ReadResponse(bufio.NewReader(c), nil); err == nil && resp.StatusCode != http.StatusRequestHeaderFieldsTooLarge {
		t.Errorf("status = %d, want 431", resp.StatusCode)
	}
	c.Close()
	<-errc
	want := Decision{SandboxID: sandboxID, Reason: "request header too large"}
	if diff := cmp.Diff(want, e.next(), ignoreTiming); diff != "" {
		t.Errorf("decision (-want +got):\n%s", diff)
	}
}

func TestIdleConnectionCloses(t *testing.T) {
	e := newEnv(t, func(o *Options) { o.IdleTimeout = 100 * time.Millisecond })
	c := e.serve(t.Context(), sandbox(allowAll{}))
	expectClosed(t, c, c)
	e.noMore()
}

func TestHeaderTimeout(t *testing.T) {
	e := newEnv(t, func(o *Options) { o.HeaderTimeout = 100 * time.Millisecond })
	c := e.serve(t.Context(), sandbox(allowAll{}))
	if _, err := io.WriteString(c, "GET http://allowed.test/ HTTP/1.1\r\n"); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil || resp.StatusCode != http.StatusRequestTimeout {
		t.Fatalf("answer %v, %v; want 408", resp, err)
	}
	readBody(t, resp)
	if d := e.next(); d.Reason != "request header timeout" {
		t.Errorf("decision %+v, want a header timeout", d)
	}
}

// TestDecisionLog checks that a decision reaches the injected logger with
// the constant keys (SECURITY D30).
func TestDecisionLog(t *testing.T) {
	var mu sync.Mutex
	var buf bytes.Buffer
	e := newEnv(t, func(o *Options) {
		o.Logger = slog.New(slog.NewJSONHandler(lockedWriter{&mu, &buf}, nil))
	})
	c := e.serve(t.Context(), sandbox(allowSet{}))
	resp := roundTrip(t, c, bufio.NewReader(c), "GET http://evil.test:8080/ HTTP/1.1\r\n\r\n", "GET")
	readBody(t, resp)
	e.next()

	mu.Lock()
	defer mu.Unlock()
	var rec map[string]any
	if err := json.Unmarshal(buf.Bytes(), &rec); err != nil {
		t.Fatalf("log %q: %v", buf.String(), err)
	}
	for k, v := range map[string]any{
		"msg": "egress denied", "sandbox_id": sandboxID, "method": "GET", "host": "evil.test",
		"port": 8080.0, "allowed": false, "reason": "not in allowlist", "bytes_up": 0.0, "bytes_down": 0.0,
	} {
		if rec[k] != v {
			t.Errorf("log %s = %v, want %v", k, rec[k], v)
		}
	}
}

type lockedWriter struct {
	mu *sync.Mutex
	w  io.Writer
}

func (l lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

func TestZeroOptions(t *testing.T) {
	p := New(Options{})
	if p.resolver != any(net.DefaultResolver) || p.allowAddr != nil || p.log == nil {
		t.Errorf("New(Options{}) is not the production setting: %+v", p)
	}
	if p.dialTimeout != DefaultDialTimeout || p.headerTimeout != DefaultHeaderTimeout || p.idleTimeout != DefaultIdleTimeout {
		t.Errorf("New(Options{}) timeouts %v %v %v", p.dialTimeout, p.headerTimeout, p.idleTimeout)
	}
}

// A body long enough to be spliced carries exactly its announced length:
// what an upstream sends beyond it never reaches the client, where it
// would be read as the answer to the next request.
func TestForwardSplicedBodyExactLength(t *testing.T) {
	const length = 200_000
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				br := bufio.NewReader(c)
				if _, err := http.ReadRequest(br); err != nil {
					return
				}
				fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n", length)
				c.Write(bytes.Repeat([]byte("a"), length))
				c.Write([]byte("HTTP/1.1 200 OK\r\nContent-Length: 8\r\n\r\ninjected"))
				io.Copy(io.Discard, br) // open until the proxy closes it
			}()
		}
	}()
	e := newEnv(t, nil)
	e.res.set(allowedHost, []netip.Addr{loopback4})
	port := ln.Addr().(*net.TCPAddr).Port
	target := net.JoinHostPort(allowedHost, strconv.Itoa(port))
	// Spliced to a client's own socket; copied through the large buffer
	// to a relay (gVisor's guest), never through the relay's ReadFrom.
	for name, open := range map[string]func() net.Conn{
		"client socket": func() net.Conn { return e.serve(t.Context(), sandbox(allowSet{target})) },
		"relay": func() net.Conn {
			uc := e.serveUnix(sandbox(allowSet{target}))
			if _, err := uc.Write([]byte{guest.EgressRelay}); err != nil {
				t.Fatal(err)
			}
			return uc
		},
	} {
		c := open()
		br := bufio.NewReader(c)
		for i := range 2 {
			resp := roundTrip(t, c, br, "GET http://"+target+"/ HTTP/1.1\r\n\r\n", "GET")
			body := readBody(t, resp)
			if resp.StatusCode != 200 || body != strings.Repeat("a", length) {
				t.Fatalf("%s, request %d: status %d, %d bytes (%q...)", name, i, resp.StatusCode, len(body), body[:min(len(body), 20)])
			}
			if d := e.next(); !d.Allowed || d.BytesDown != length {
				t.Errorf("%s, request %d: decision %+v, want %d bytes down", name, i, d, length)
			}
		}
		c.Close()
	}
}
