package egress

import (
	"bufio"
	"crypto/tls"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/agentbox/agentbox/internal/guest"
)

// serveUnix starts ServeConn on the server end of a unix connection, as
// the manager does on a sandbox's egress socket, and returns the relay's
// end.
func (e *env) serveUnix(sb Sandbox) *net.UnixConn {
	e.t.Helper()
	ln, err := net.Listen("unix", filepath.Join(e.t.TempDir(), "egress.sock"))
	if err != nil {
		e.t.Fatal(err)
	}
	defer ln.Close()
	client, err := net.Dial("unix", ln.Addr().String())
	if err != nil {
		e.t.Fatal(err)
	}
	server, err := ln.Accept()
	if err != nil {
		e.t.Fatal(err)
	}
	e.start(e.t.Context(), client, server, sb)
	return client.(*net.UnixConn)
}

// tcpPair is a connected pair of loopback TCP connections: the client's
// end, and the end the guest's relay accepted.
func tcpPair(t *testing.T) (client, accepted *net.TCPConn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	s, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close(); s.Close() })
	return c.(*net.TCPConn), s.(*net.TCPConn)
}

// handOver sends the handoff marker with f's descriptor attached.
func handOver(t *testing.T, uc *net.UnixConn, fd int) {
	t.Helper()
	if _, _, err := uc.WriteMsgUnix([]byte{guest.EgressHandoff}, syscall.UnixRights(fd), nil); err != nil {
		t.Fatal(err)
	}
}

// A relay that hands over the client's socket is done with the egress
// connection: the proxy closes it and serves the client's socket itself,
// with every check, end to end.
func TestHandoffServesClientSocket(t *testing.T) {
	ts, pool := tlsUpstream(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, "hello from "+r.Host)
	}))
	up := addrPort(t, ts.Listener.Addr())
	e := newEnv(t, nil)
	e.res.set(allowedHost, []netip.Addr{loopback4})
	target := net.JoinHostPort(allowedHost, strconv.Itoa(int(up.Port())))
	uc := e.serveUnix(sandbox(allowSet{target}))

	client, accepted := tcpPair(t)
	f, err := accepted.File()
	if err != nil {
		t.Fatal(err)
	}
	handOver(t, uc, int(f.Fd()))
	f.Close()
	accepted.Close() // the proxy holds the socket now
	uc.SetReadDeadline(time.Now().Add(10 * time.Second))
	if n, err := uc.Read(make([]byte, 1)); n != 0 || err != io.EOF {
		t.Fatalf("egress connection after a handoff: read %d, %v; want it closed", n, err)
	}

	br, resp := connect(t, client, target, nil)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("CONNECT status = %d, want 200", resp.StatusCode)
	}
	tc := tls.Client(bufConn{client, br}, &tls.Config{RootCAs: pool, ServerName: allowedHost})
	req, _ := http.NewRequest(http.MethodGet, "https://"+target+"/", nil)
	if err := req.Write(tc); err != nil {
		t.Fatal(err)
	}
	got, err := http.ReadResponse(bufio.NewReader(tc), req)
	if err != nil {
		t.Fatal(err)
	}
	if body := readBody(t, got); body != "hello from "+target {
		t.Errorf("body = %q", body)
	}
	tc.Close()
	if d := e.next(); !d.Allowed || d.Host != allowedHost || d.BytesDown < 500 {
		t.Errorf("decision %+v, want an allowed tunnel to %s that moved a handshake", d, allowedHost)
	}

	// The handed-over socket meets the same checks.
	client2, accepted2 := tcpPair(t)
	uc2 := e.serveUnix(sandbox(allowSet{target}))
	f2, err := accepted2.File()
	if err != nil {
		t.Fatal(err)
	}
	handOver(t, uc2, int(f2.Fd()))
	f2.Close()
	accepted2.Close()
	if _, resp := connect(t, client2, "evil.test:443", nil); resp.StatusCode != http.StatusForbidden {
		t.Errorf("CONNECT evil.test over a handed-over socket: status %d, want 403", resp.StatusCode)
	}
	if d := e.next(); d.Allowed || d.Reason != reasonNotAllowed {
		t.Errorf("decision %+v, want refused: %s", d, reasonNotAllowed)
	}
}

// What is not a TCP socket is not served: the proxy says it got none and
// the relay carries the bytes. So does a relay that says so first, and a
// client that speaks HTTP on the socket itself; each meets the checks.
func TestHandoffFallbacks(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer w.Close()
	for name, open := range map[string]func(t *testing.T, uc *net.UnixConn){
		"pipe handed over": func(t *testing.T, uc *net.UnixConn) {
			handOver(t, uc, int(r.Fd()))
			uc.SetReadDeadline(time.Now().Add(10 * time.Second))
			b := make([]byte, 1)
			if n, err := uc.Read(b); n != 1 || b[0] != guest.EgressRelayAck {
				t.Fatalf("answer to a pipe: %q, %v; want %q", b[:n], err, guest.EgressRelayAck)
			}
			uc.SetReadDeadline(time.Time{})
		},
		"nothing handed over": func(t *testing.T, uc *net.UnixConn) {
			if _, err := uc.Write([]byte{guest.EgressHandoff}); err != nil {
				t.Fatal(err)
			}
			b := make([]byte, 1)
			if n, err := uc.Read(b); n != 1 || b[0] != guest.EgressRelayAck {
				t.Fatalf("answer: %q, %v; want %q", b[:n], err, guest.EgressRelayAck)
			}
		},
		"relay": func(t *testing.T, uc *net.UnixConn) {
			if _, err := uc.Write([]byte{guest.EgressRelay}); err != nil {
				t.Fatal(err)
			}
		},
		"plain http": func(*testing.T, *net.UnixConn) {},
	} {
		t.Run(name, func(t *testing.T) {
			e := newEnv(t, nil)
			uc := e.serveUnix(sandbox(allowSet{"allowed.test:443"}))
			open(t, uc)
			if _, resp := connect(t, uc, "evil.test:443", nil); resp.StatusCode != http.StatusForbidden {
				t.Errorf("CONNECT evil.test: status %d, want 403", resp.StatusCode)
			}
			if d := e.next(); d.Allowed || d.Reason != reasonNotAllowed {
				t.Errorf("decision %+v, want refused: %s", d, reasonNotAllowed)
			}
		})
	}
}
