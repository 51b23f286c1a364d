package mitm

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"fmt"
	"io"
	"log"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentbox/agentbox/internal/policy"
)

const (
	tokenValue = "ghp_REALvalue0123456789abcdefREAL"
	keyValue   = "key-REAL-8443-zzzz"
)

// testPKI is a CA of the test's own, standing for the public roots, so
// that the upstream is verified for real.
type testPKI struct {
	key  *ecdsa.PrivateKey
	cert *x509.Certificate
	pool *x509.CertPool
}

func newTestPKI(t *testing.T) *testPKI {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test root"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	return &testPKI{key: key, cert: cert, pool: pool}
}

func (p *testPKI) leaf(t *testing.T, host string) tls.Certificate {
	t.Helper()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2), DNSNames: []string{host},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}, KeyUsage: x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, p.cert, &key.PublicKey, p.key)
	if err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

// seen is what the upstream received.
type seen struct {
	auth, key, other, query, body string
	upgrade                       string
}

// env is an upstream for api.test, an agentbox CA and a Swapper.
type env struct {
	t        *testing.T
	ca       *CA
	sw       *Swapper
	up       *httptest.Server
	upRoots  *x509.CertPool
	tokenPH  string
	keyPH    string
	mu       sync.Mutex
	received []seen
}

func newEnv(t *testing.T) *env {
	t.Helper()
	e := &env{t: t}
	var err error
	if e.ca, err = LoadOrCreateCA(t.TempDir()); err != nil {
		t.Fatal(err)
	}
	if e.tokenPH, err = NewPlaceholder("GITHUB_TOKEN"); err != nil {
		t.Fatal(err)
	}
	if e.keyPH, err = NewPlaceholder("API_KEY"); err != nil {
		t.Fatal(err)
	}
	pat := func(s string) []policy.HostPattern {
		p, err := policy.ParseHostPattern(s)
		if err != nil {
			t.Fatal(err)
		}
		return []policy.HostPattern{p}
	}
	e.sw, err = NewSwapper(e.ca, []Binding{
		{Name: "GITHUB_TOKEN", Placeholder: e.tokenPH, Value: []byte(tokenValue), Hosts: pat("api.test:443"), Format: "Bearer {{value}}"},
		{Name: "API_KEY", Placeholder: e.keyPH, Value: []byte(keyValue), Hosts: pat("api.test"), Port: 8443, Header: "x-api-key"},
	})
	if err != nil {
		t.Fatal(err)
	}
	pki := newTestPKI(t)
	e.upRoots = pki.pool
	e.up = httptest.NewUnstartedServer(http.HandlerFunc(e.echo))
	e.up.TLS = &tls.Config{Certificates: []tls.Certificate{pki.leaf(t, "api.test")}}
	e.up.Config.ErrorLog = log.New(io.Discard, "", 0)
	e.up.StartTLS()
	t.Cleanup(e.up.Close)
	return e
}

// echo returns what it received, in a header and the body, the way a
// careless upstream would.
func (e *env) echo(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	s := seen{auth: r.Header.Get("Authorization"), key: r.Header.Get("X-Api-Key"), other: r.Header.Get("X-Other"),
		query: r.URL.RawQuery, body: string(body), upgrade: r.Header.Get("Upgrade")}
	e.mu.Lock()
	e.received = append(e.received, s)
	e.mu.Unlock()
	w.Header().Set("X-Echo-Auth", s.auth)
	w.Header().Set("X-Echo-Key", s.key)
	var out io.Writer = w
	if r.URL.Query().Has("gzip") {
		w.Header().Set("Content-Encoding", "gzip")
		zw := gzip.NewWriter(w)
		defer zw.Close()
		out = zw
	}
	if r.URL.Query().Has("split") {
		// The value split across two writes, flushed between.
		v := s.auth
		fmt.Fprintf(out, "start %s", v[:len(v)/2])
		w.(http.Flusher).Flush()
		time.Sleep(10 * time.Millisecond)
		fmt.Fprintf(out, "%s end\n", v[len(v)/2:])
		return
	}
	fmt.Fprintf(out, "auth=%s\nkey=%s\nother=%s\nquery=%s\nbody=%s\n", s.auth, s.key, s.other, s.query, s.body)
}

func (e *env) seen() []seen {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]seen(nil), e.received...)
}

// served is Serve's outcome.
type served struct {
	st  Stats
	err error
}

// conn is one sandbox connection through the swapper.
type conn struct {
	tls  *tls.Conn
	br   *bufio.Reader
	read bytes.Buffer // every plaintext byte the client read
	done chan served
}

// dial connects a client that trusts roots (the agentbox CA when nil) with
// the given SNI to a Swapper serving api.test on port, with upstreamRoots
// as the upstream's roots.
func (e *env) dial(sni string, port int, roots, upstreamRoots *x509.CertPool) (*conn, error) {
	t := e.t
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	ctx, cancel := context.WithCancel(t.Context())
	c := &conn{done: make(chan served, 1)}
	go func() {
		defer cancel()
		sc, err := ln.Accept()
		if err != nil {
			c.done <- served{err: err}
			return
		}
		defer sc.Close()
		upAddr := e.up.Listener.Addr().String()
		st, err := e.sw.Serve(ctx, sc, "api.test", port, func(ctx context.Context) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "tcp", upAddr)
		}, &tls.Config{RootCAs: upstreamRoots})
		c.done <- served{st, err}
	}()
	raw, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	if roots == nil {
		roots = x509.NewCertPool()
		roots.AppendCertsFromPEM(e.ca.CertPEM())
	}
	c.tls = tls.Client(raw, &tls.Config{ServerName: sni, RootCAs: roots, NextProtos: []string{"http/1.1"}})
	t.Cleanup(func() { c.tls.Close() })
	c.br = bufio.NewReader(io.TeeReader(c.tls, &c.read))
	if err := c.tls.HandshakeContext(t.Context()); err != nil {
		raw.Close()
		return c, err
	}
	return c, nil
}

// do sends raw (a request head, "\r\n" line ends added) and body, and reads
// the response.
func (c *conn) do(t *testing.T, head, body string) (*http.Response, string) {
	t.Helper()
	head = strings.ReplaceAll(strings.TrimSpace(head), "\n", "\r\n")
	if body != "" {
		head += fmt.Sprintf("\r\nContent-Length: %d", len(body))
	}
	if _, err := io.WriteString(c.tls, head+"\r\n\r\n"+body); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(c.br, nil)
	if err != nil {
		t.Fatalf("reading response: %v", err)
	}
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("reading body: %v", err)
	}
	return resp, string(b)
}

// finish closes the client and returns Serve's outcome.
func (c *conn) finish(t *testing.T) served {
	t.Helper()
	c.tls.Close()
	select {
	case s := <-c.done:
		return s
	case <-time.After(10 * time.Second):
		t.Fatal("Serve did not return")
		return served{}
	}
}

// noLeak fails if the client ever read a real value.
func (c *conn) noLeak(t *testing.T) {
	t.Helper()
	for _, v := range []string{tokenValue, keyValue} {
		if bytes.Contains(c.read.Bytes(), []byte(v)) {
			t.Errorf("client read the real value %q:\n%s", v, c.read.Bytes())
		}
	}
}

func TestSwapBoundHeaderOnly(t *testing.T) {
	e := newEnv(t)
	c, err := e.dial("api.test", 443, nil, e.upRoots)
	if err != nil {
		t.Fatal(err)
	}
	ph := e.tokenPH
	resp, body := c.do(t, `POST /x?t=`+ph+` HTTP/1.1
Host: api.test
Authorization: Bearer `+ph+`
X-Other: Bearer `+ph+`
X-Api-Key: `+e.keyPH, "body "+ph)
	if resp.StatusCode != 200 {
		t.Fatalf("status %d: %s", resp.StatusCode, body)
	}
	got := e.seen()
	want := seen{auth: "Bearer " + tokenValue, key: e.keyPH, other: "Bearer " + ph, query: "t=" + ph, body: "body " + ph}
	if len(got) != 1 || got[0] != want {
		t.Fatalf("upstream saw %+v, want %+v", got, want)
	}
	if h := resp.Header.Get("X-Echo-Auth"); h != "Bearer "+ph {
		t.Errorf("echoed header = %q, want the placeholder", h)
	}
	if !strings.Contains(body, "auth=Bearer "+ph+"\n") {
		t.Errorf("echoed body lacks the placeholder:\n%s", body)
	}
	s := c.finish(t)
	if s.err != nil {
		t.Errorf("Serve: %v", s.err)
	}
	if s.st.Requests != 1 || s.st.Swaps != 1 || s.st.BytesUp == 0 || s.st.BytesDown == 0 {
		t.Errorf("stats = %+v", s.st)
	}
	c.noLeak(t)
}

func TestSwapPortBound(t *testing.T) {
	e := newEnv(t)
	if !e.sw.Intercepts("api.test", 443) || !e.sw.Intercepts("api.test", 8443) {
		t.Fatal("bound ports not intercepted")
	}
	if e.sw.Intercepts("api.test", 80) || e.sw.Intercepts("other.test", 443) || e.sw.Intercepts("x.api.test", 443) {
		t.Error("unbound host or port intercepted")
	}
	// On 8443 only API_KEY is bound: GITHUB_TOKEN (api.test:443) goes
	// out as its placeholder.
	c, err := e.dial("api.test", 8443, nil, e.upRoots)
	if err != nil {
		t.Fatal(err)
	}
	resp, body := c.do(t, `GET / HTTP/1.1
Host: api.test:8443
Authorization: Bearer `+e.tokenPH+`
X-Api-Key: `+e.keyPH, "")
	if resp.StatusCode != 200 {
		t.Fatalf("status %d: %s", resp.StatusCode, body)
	}
	got := e.seen()
	if len(got) != 1 || got[0].auth != "Bearer "+e.tokenPH || got[0].key != keyValue {
		t.Errorf("upstream saw %+v", got)
	}
	if resp.Header.Get("X-Echo-Key") != e.keyPH {
		t.Errorf("echoed key = %q", resp.Header.Get("X-Echo-Key"))
	}
	if s := c.finish(t); s.err != nil || s.st.Swaps != 1 {
		t.Errorf("Serve: %+v", s)
	}
	c.noLeak(t)
}

func TestServeRefusesUnboundTunnel(t *testing.T) {
	e := newEnv(t)
	c, err := e.dial("api.test", 9443, nil, e.upRoots)
	if err == nil {
		t.Error("handshake on an unbound port succeeded")
	}
	if s := c.finish(t); !errors.Is(s.err, ErrNotIntercepted) {
		t.Errorf("Serve: %v, want ErrNotIntercepted", s.err)
	}
}

func TestSwapKeepAlive(t *testing.T) {
	e := newEnv(t)
	c, err := e.dial("api.test", 443, nil, e.upRoots)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		resp, body := c.do(t, "GET /"+fmt.Sprint(i)+" HTTP/1.1\nHost: api.test\nAuthorization: Bearer "+e.tokenPH, "")
		if resp.StatusCode != 200 || resp.Close {
			t.Fatalf("request %d: status %d close %v: %s", i, resp.StatusCode, resp.Close, body)
		}
	}
	got := e.seen()
	if len(got) != 2 || got[0].auth != "Bearer "+tokenValue || got[1].auth != "Bearer "+tokenValue {
		t.Errorf("upstream saw %+v", got)
	}
	if s := c.finish(t); s.err != nil || s.st.Requests != 2 || s.st.Swaps != 2 {
		t.Errorf("Serve: %+v", s)
	}
	c.noLeak(t)
}

func TestSwapSplitValueRedacted(t *testing.T) {
	for _, q := range []string{"split", "split&gzip", "gzip"} {
		t.Run(q, func(t *testing.T) {
			e := newEnv(t)
			c, err := e.dial("api.test", 443, nil, e.upRoots)
			if err != nil {
				t.Fatal(err)
			}
			resp, body := c.do(t, "GET /?"+q+" HTTP/1.1\nHost: api.test\nAuthorization: Bearer "+e.tokenPH, "")
			if resp.StatusCode != 200 {
				t.Fatalf("status %d: %s", resp.StatusCode, body)
			}
			if !strings.Contains(body, e.tokenPH) {
				t.Errorf("body lacks the placeholder: %q", body)
			}
			if s := c.finish(t); s.err != nil {
				t.Errorf("Serve: %v", s.err)
			}
			c.noLeak(t)
		})
	}
}

func TestSwapRefusals(t *testing.T) {
	for _, tc := range []struct {
		name, head string
		status     int
	}{
		{"upgrade", "GET / HTTP/1.1\nHost: api.test\nConnection: Upgrade\nUpgrade: websocket\nAuthorization: Bearer PH", http.StatusNotImplemented},
		{"connection upgrade only", "GET / HTTP/1.1\nHost: api.test\nConnection: keep-alive, upgrade\nAuthorization: Bearer PH", http.StatusNotImplemented},
		{"h2c", "GET / HTTP/1.1\nHost: api.test\nConnection: Upgrade, HTTP2-Settings\nUpgrade: h2c\nHTTP2-Settings: AAMAAABkAAQAAP__", http.StatusNotImplemented},
		{"h2c settings only", "GET / HTTP/1.1\nHost: api.test\nHTTP2-Settings: AAMAAABkAAQAAP__", http.StatusNotImplemented},
		{"connect", "CONNECT other.test:443 HTTP/1.1\nHost: other.test:443\nAuthorization: Bearer PH", http.StatusMethodNotAllowed},
		{"other host", "GET / HTTP/1.1\nHost: other.test\nAuthorization: Bearer PH", http.StatusMisdirectedRequest},
		{"other port", "GET / HTTP/1.1\nHost: api.test:444\nAuthorization: Bearer PH", http.StatusMisdirectedRequest},
		{"absolute other host", "GET https://other.test/ HTTP/1.1\nHost: api.test\nAuthorization: Bearer PH", http.StatusMisdirectedRequest},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			c, err := e.dial("api.test", 443, nil, e.upRoots)
			if err != nil {
				t.Fatal(err)
			}
			resp, body := c.do(t, strings.ReplaceAll(tc.head, "PH", e.tokenPH), "")
			if resp.StatusCode != tc.status {
				t.Errorf("status %d, want %d: %s", resp.StatusCode, tc.status, body)
			}
			if got := e.seen(); len(got) != 0 {
				t.Errorf("upstream saw %+v", got)
			}
			if s := c.finish(t); !errors.Is(s.err, ErrRefused) {
				t.Errorf("Serve: %v, want ErrRefused", s.err)
			}
			c.noLeak(t)
		})
	}
}

func TestSwapHandshakeRefusals(t *testing.T) {
	t.Run("wrong sni", func(t *testing.T) {
		e := newEnv(t)
		c, err := e.dial("other.test", 443, nil, e.upRoots)
		if err == nil {
			t.Error("handshake with another SNI succeeded")
		}
		if s := c.finish(t); !errors.Is(s.err, ErrSNIMismatch) {
			t.Errorf("Serve: %v, want ErrSNIMismatch", s.err)
		}
	})
	t.Run("client does not trust the CA", func(t *testing.T) {
		e := newEnv(t)
		other, err := LoadOrCreateCA(t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		roots := x509.NewCertPool()
		roots.AppendCertsFromPEM(other.CertPEM())
		c, err := e.dial("api.test", 443, roots, e.upRoots)
		var uerr x509.UnknownAuthorityError
		if !errors.As(err, &uerr) {
			t.Errorf("client handshake: %v, want an unknown authority", err)
		}
		if s := c.finish(t); s.err == nil {
			t.Error("Serve succeeded")
		}
	})
	t.Run("upstream does not verify", func(t *testing.T) {
		e := newEnv(t)
		c, err := e.dial("api.test", 443, nil, newTestPKI(t).pool)
		if err != nil {
			t.Fatal(err)
		}
		resp, body := c.do(t, "GET / HTTP/1.1\nHost: api.test\nAuthorization: Bearer "+e.tokenPH, "")
		if resp.StatusCode != http.StatusBadGateway {
			t.Errorf("status %d, want 502: %s", resp.StatusCode, body)
		}
		s := c.finish(t)
		var uerr x509.UnknownAuthorityError
		if !errors.As(s.err, &uerr) {
			t.Errorf("Serve: %v, want an unknown authority", s.err)
		}
		if got := e.seen(); len(got) != 0 {
			t.Errorf("upstream saw %+v", got)
		}
	})
	t.Run("client offers only h2", func(t *testing.T) {
		e := newEnv(t)
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		done := make(chan error, 1)
		go func() {
			sc, err := ln.Accept()
			if err != nil {
				done <- err
				return
			}
			defer sc.Close()
			_, err = e.sw.Serve(t.Context(), sc, "api.test", 443, func(context.Context) (net.Conn, error) {
				return nil, errors.New("not reached")
			}, nil)
			done <- err
		}()
		raw, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		roots := x509.NewCertPool()
		roots.AppendCertsFromPEM(e.ca.CertPEM())
		tc := tls.Client(raw, &tls.Config{ServerName: "api.test", RootCAs: roots, NextProtos: []string{"h2"}})
		defer tc.Close()
		if err := tc.Handshake(); err == nil {
			t.Errorf("h2-only handshake succeeded with %q", tc.ConnectionState().NegotiatedProtocol)
		}
		if err := <-done; err == nil {
			t.Error("Serve succeeded")
		}
	})
}

func TestServeContextCancel(t *testing.T) {
	e := newEnv(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() {
		sc, err := ln.Accept()
		if err != nil {
			done <- err
			return
		}
		defer sc.Close()
		addr := e.up.Listener.Addr().String()
		_, err = e.sw.Serve(ctx, sc, "api.test", 443, func(ctx context.Context) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "tcp", addr)
		}, &tls.Config{RootCAs: e.upRoots})
		done <- err
	}()
	raw, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(e.ca.CertPEM())
	tc := tls.Client(raw, &tls.Config{ServerName: "api.test", RootCAs: roots})
	if err := tc.Handshake(); err != nil {
		t.Fatal(err)
	}
	// An idle keep-alive connection ends with the context.
	time.Sleep(50 * time.Millisecond)
	cancel()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Serve did not return after cancel")
	}
}

func TestNewSwapperRefuses(t *testing.T) {
	ca, err := LoadOrCreateCA(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	ph, _ := NewPlaceholder("TOKEN")
	hosts := []policy.HostPattern{{Host: "api.test", Ports: []int{443}}}
	good := Binding{Name: "TOKEN", Placeholder: ph, Value: []byte("v4lue"), Hosts: hosts}
	if _, err := NewSwapper(ca, []Binding{good}); err != nil {
		t.Fatal(err)
	}
	for name, mod := range map[string]func(*Binding){
		"no placeholder":     func(b *Binding) { b.Placeholder = "" },
		"empty value":        func(b *Binding) { b.Value = nil },
		"newline in value":   func(b *Binding) { b.Value = []byte("a\r\nX-Evil: 1") },
		"no hosts":           func(b *Binding) { b.Hosts = nil },
		"format lacks value": func(b *Binding) { b.Format = "Bearer" },
		"bad header":         func(b *Binding) { b.Header = "Auth orization" },
		"value in placeholder": func(b *Binding) {
			b.Value = []byte("TOKEN")
		},
	} {
		b := good
		mod(&b)
		if _, err := NewSwapper(ca, []Binding{b}); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

func TestNewPlaceholder(t *testing.T) {
	a, err := NewPlaceholder("GITHUB_TOKEN")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := NewPlaceholder("GITHUB_TOKEN")
	rest, ok := strings.CutPrefix(a, "agentbox-secret-GITHUB_TOKEN-")
	if !ok || len(rest) != 32 || strings.Trim(rest, "0123456789abcdef") != "" {
		t.Errorf("placeholder %q", a)
	}
	if a == b {
		t.Error("two placeholders are equal")
	}
	for _, bad := range []string{"", "lower", "A-B", "AGENTBOX_X"} {
		if _, err := NewPlaceholder(bad); err == nil {
			t.Errorf("NewPlaceholder(%q) succeeded", bad)
		}
	}
}
