package egress

import (
	"bufio"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"fmt"
	"io"
	"log/slog"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

// Everything here stays on 127.0.0.1, ::1 and net.Pipe: names live under
// .test and .invalid and only fakeResolver knows them.

const (
	allowedHost = "allowed.test"
	sandboxID   = "sb_test"
)

var (
	loopback4 = netip.MustParseAddr("127.0.0.1")
	loopback6 = netip.MustParseAddr("::1")
)

// onlyLoopback4 is the AllowAddr of the tests that reach an upstream: it
// lets exactly 127.0.0.1 through.
func onlyLoopback4(a netip.Addr) bool { return a == loopback4 }

// ignoreTiming compares decisions without their durations.
var ignoreTiming = cmp.Options{
	cmpopts.IgnoreFields(Decision{}, "Duration"),
	cmpopts.EquateComparable(netip.AddrPort{}),
}

// fakeResolver answers for names under .test and .invalid from a table;
// successive lookups of a name walk its answers, the last one repeating.
type fakeResolver struct {
	mu      sync.Mutex
	answers map[string][][]netip.Addr
	calls   []string
}

func (r *fakeResolver) set(host string, answers ...[]netip.Addr) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.answers == nil {
		r.answers = map[string][][]netip.Addr{}
	}
	r.answers[host] = answers
}

func (r *fakeResolver) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, c := range r.calls {
		if c == host {
			n++
		}
	}
	r.calls = append(r.calls, host)
	if !strings.HasSuffix(host, ".test") && !strings.HasSuffix(host, ".invalid") {
		return nil, fmt.Errorf("fake resolver: %q is outside .test and .invalid", host)
	}
	seq := r.answers[host]
	if len(seq) == 0 {
		return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
	}
	return slices.Clone(seq[min(n, len(seq)-1)]), nil
}

func (r *fakeResolver) lookups() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.calls)
}

// allowSet allows exactly the "host:port" entries it holds.
type allowSet []string

func (a allowSet) Allowed(host string, port int) bool {
	return slices.Contains(a, net.JoinHostPort(host, strconv.Itoa(port)))
}

// allowAll lets every host through, so that only the proxy's other checks
// are left to refuse.
type allowAll struct{}

func (allowAll) Allowed(string, int) bool { return true }

// env is one proxy under test and what it reported.
type env struct {
	t         *testing.T
	res       *fakeResolver
	p         *Proxy
	decisions chan Decision
}

// newEnv builds a proxy that resolves with a fake resolver, allows
// 127.0.0.1 as an upstream, and reports decisions to the test. mod may
// change the options.
func newEnv(t *testing.T, mod func(*Options)) *env {
	e := &env{t: t, res: &fakeResolver{}, decisions: make(chan Decision, 64)}
	opts := Options{
		OnDecision:    func(d Decision) { e.decisions <- d },
		Resolver:      e.res,
		AllowAddr:     onlyLoopback4,
		HeaderTimeout: 5 * time.Second,
	}
	if mod != nil {
		mod(&opts)
	}
	e.p = New(opts)
	return e
}

// serve starts ServeConn on the server end of a loopback TCP connection
// and returns the sandbox end. The test waits for ServeConn to return.
func (e *env) serve(ctx context.Context, sb Sandbox) net.Conn {
	e.t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		e.t.Fatalf("listening: %v", err)
	}
	defer ln.Close()
	client, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		e.t.Fatalf("dialing the proxy: %v", err)
	}
	server, err := ln.Accept()
	if err != nil {
		client.Close()
		e.t.Fatalf("accepting: %v", err)
	}
	e.start(ctx, client, server, sb)
	return client
}

// servePipe is serve over net.Pipe, a conn that cannot half-close.
func (e *env) servePipe(ctx context.Context, sb Sandbox) net.Conn {
	client, server := net.Pipe()
	e.start(ctx, client, server, sb)
	return client
}

func (e *env) start(ctx context.Context, client, server net.Conn, sb Sandbox) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		e.p.ServeConn(ctx, server, sb.ID, sb.Allow)
	}()
	e.t.Cleanup(func() {
		client.Close()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			e.t.Error("ServeConn did not return after the client closed")
		}
	})
}

// next returns the next decision, failing the test if none comes.
func (e *env) next() Decision {
	e.t.Helper()
	select {
	case d := <-e.decisions:
		return d
	case <-time.After(10 * time.Second):
		e.t.Fatal("no decision reported")
	}
	return Decision{}
}

// noMore fails the test if a decision is pending.
func (e *env) noMore() {
	e.t.Helper()
	select {
	case d := <-e.decisions:
		e.t.Errorf("unexpected decision %+v", d)
	case <-time.After(50 * time.Millisecond):
	}
}

func sandbox(allow Allowlist) Sandbox { return Sandbox{ID: sandboxID, Allow: allow} }

func addrPort(t *testing.T, a net.Addr) netip.AddrPort {
	t.Helper()
	ap, err := netip.ParseAddrPort(a.String())
	if err != nil {
		t.Fatalf("parsing %s: %v", a, err)
	}
	return ap
}

// connect sends a CONNECT for target and reads the proxy's answer.
func connect(t *testing.T, c net.Conn, target string, after []byte) (*bufio.Reader, *http.Response) {
	t.Helper()
	msg := "CONNECT " + target + " HTTP/1.1\r\nHost: " + target + "\r\n\r\n"
	if _, err := c.Write(append([]byte(msg), after...)); err != nil {
		t.Fatalf("writing CONNECT: %v", err)
	}
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, &http.Request{Method: http.MethodConnect})
	if err != nil {
		t.Fatalf("reading the CONNECT answer: %v", err)
	}
	return br, resp
}

// readBody returns a refusal's body.
func readBody(t *testing.T, resp *http.Response) string {
	t.Helper()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("reading body: %v", err)
	}
	resp.Body.Close()
	return string(b)
}

// expectClosed fails the test unless the proxy closes c.
func expectClosed(t *testing.T, r io.Reader, c net.Conn) {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	b, err := io.ReadAll(r)
	if err != nil && !strings.Contains(err.Error(), "reset") {
		t.Errorf("reading until the proxy closes: %v", err)
	}
	if len(b) != 0 {
		t.Errorf("got %d more bytes (%q) before the close, want none", len(b), b[:min(len(b), 64)])
	}
}

// bufConn reads through the bufio.Reader that consumed the CONNECT answer.
type bufConn struct {
	net.Conn
	r *bufio.Reader
}

func (c bufConn) Read(b []byte) (int, error) { return c.r.Read(b) }

// rawUpstream is a TCP server on 127.0.0.1 that records what each
// connection sends (until EOF, or readN bytes when set), then answers with
// reply and closes.
type rawUpstream struct {
	ln    net.Listener
	readN int
	reply []byte
	got   chan []byte
	first chan struct{} // a byte arrived on a connection read to EOF
	wg    sync.WaitGroup
}

func newRawUpstream(t *testing.T, network, addr string, readN int, reply []byte) *rawUpstream {
	t.Helper()
	ln, err := net.Listen(network, addr)
	if err != nil {
		t.Fatalf("listening: %v", err)
	}
	u := &rawUpstream{ln: ln, readN: readN, reply: reply, got: make(chan []byte, 16), first: make(chan struct{}, 16)}
	u.wg.Add(1)
	go func() {
		defer u.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			u.wg.Add(1)
			go func() {
				defer u.wg.Done()
				defer c.Close()
				_ = c.SetDeadline(time.Now().Add(20 * time.Second))
				var b []byte
				if u.readN > 0 {
					b = make([]byte, u.readN)
					n, _ := io.ReadFull(c, b)
					b = b[:n]
				} else {
					first := make([]byte, 1)
					if n, _ := c.Read(first); n == 1 {
						u.first <- struct{}{}
						rest, _ := io.ReadAll(c)
						b = append(first, rest...)
					}
				}
				u.got <- b
				_, _ = c.Write(u.reply)
			}()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		u.wg.Wait()
	})
	return u
}

func (u *rawUpstream) port() int { return u.ln.Addr().(*net.TCPAddr).Port }

// received returns what the next connection sent.
func (u *rawUpstream) received(t *testing.T) []byte {
	t.Helper()
	select {
	case b := <-u.got:
		return b
	case <-time.After(10 * time.Second):
		t.Fatal("upstream saw no connection")
	}
	return nil
}

// untouched fails the test if the upstream saw a connection.
func (u *rawUpstream) untouched(t *testing.T) {
	t.Helper()
	select {
	case b := <-u.got:
		t.Errorf("upstream got a connection (%d bytes)", len(b))
	case <-time.After(50 * time.Millisecond):
	}
}

// tlsUpstream starts an HTTPS server for allowedHost with a certificate of
// its own and returns it with a pool that trusts it.
func tlsUpstream(t *testing.T, h http.Handler) (*httptest.Server, *x509.CertPool) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: allowedHost},
		DNSNames:              []string{allowedHost},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	ts := httptest.NewUnstartedServer(h)
	ts.TLS = &tls.Config{Certificates: []tls.Certificate{{Certificate: [][]byte{der}, PrivateKey: key}}}
	ts.StartTLS()
	t.Cleanup(ts.Close)
	return ts, pool
}

// quietLogger is a logger for tests that look at decisions, not logs.
var quietLogger = slog.New(slog.DiscardHandler)
