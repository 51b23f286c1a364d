package egress

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"sync"
	"sync/atomic"
	"time"
)

// reasonSNIMismatch cuts a tunnel whose ClientHello names another server
// than the one allowed: the allowed host's address could serve it.
const reasonSNIMismatch = "client hello: sni mismatch"

// tunnel handles a CONNECT request. It ends the HTTP phase of c whatever
// happens: after it, c carries TLS or nothing.
func (p *Proxy) tunnel(ctx context.Context, c net.Conn, br *bufio.Reader, req *http.Request, sb Sandbox, start time.Time) {
	d := Decision{SandboxID: sb.ID, Method: http.MethodConnect}
	defer func() {
		d.Duration = time.Since(start)
		p.decide(ctx, d)
	}()
	deny := func(r *refusal) {
		d.Reason = r.reason
		p.writeRefusal(c, r.status, r.reason, false, true)
	}

	rawHost, rawPort, err := splitAuthority(req.RequestURI)
	if err != nil {
		d.Host = quoteRaw(req.RequestURI)
		if errors.Is(err, errUserinfo) {
			deny(refuse(http.StatusForbidden, reasonUserinfo))
		} else {
			deny(refuse(http.StatusBadRequest, reasonBadTarget))
		}
		return
	}
	addrs, ref := p.checkTarget(ctx, sb, rawHost, rawPort, 0, &d)
	if ref != nil {
		deny(ref)
		return
	}
	// A CONNECT body would be read as the ClientHello; no client sends one.
	if req.ContentLength != 0 {
		deny(refuse(http.StatusBadRequest, reasonMalformed))
		return
	}

	up, addr, err := p.dial(ctx, addrs, d.Port)
	d.Addr = addr
	if err != nil {
		p.log.DebugContext(ctx, "egress dial failed", logSandbox, sb.ID, logHost, d.Host, logErr, err)
		deny(refuse(http.StatusBadGateway, reasonDial))
		return
	}
	defer up.Close()
	stop := context.AfterFunc(ctx, func() { up.Close() })
	defer stop()

	_ = c.SetWriteDeadline(time.Now().Add(p.headerTimeout))
	if _, err := io.WriteString(c, "HTTP/1.1 200 Connection established\r\n\r\n"); err != nil {
		d.Reason = reasonClientClosed
		return
	}
	_ = c.SetWriteDeadline(time.Time{})

	// The ClientHello may already sit in br behind the CONNECT header.
	_ = c.SetReadDeadline(time.Now().Add(p.headerTimeout))
	hello, sni, err := readClientHello(br)
	_ = c.SetReadDeadline(time.Time{})
	if err != nil {
		d.Reason = helloReason(err)
		return
	}
	if !sniMatches(sni, d.Host) {
		d.Reason = reasonSNIMismatch
		p.log.DebugContext(ctx, "egress sni mismatch", logSandbox, sb.ID, logHost, d.Host, logSNI, quoteRaw(sni))
		return
	}

	first := hello
	if n := br.Buffered(); n > 0 {
		rest, _ := br.Peek(n)
		first = append(first, rest...)
	}
	if ic, ok := sb.Allow.(Interceptor); ok && ic.Intercepts(d.Host, d.Port) {
		// Secrets are bound to this host and port: the interceptor
		// speaks TLS at both ends, from the ClientHello on.
		up.SetWriteDeadline(time.Time{})
		bu, bd, err := ic.Intercept(ctx, &replayConn{Conn: c, first: first}, d.Host, d.Port, up, p.upTLS)
		d.BytesUp, d.BytesDown = bu, bd
		d.Allowed, d.Reason = true, reasonIntercepted
		if err != nil {
			d.Reason = reasonIntercepted + ": " + err.Error()
		}
		return
	}
	d.Allowed, d.Reason = true, reasonAllowed
	_ = up.SetWriteDeadline(time.Now().Add(p.idleTimeout))
	n, err := up.Write(first)
	d.BytesUp = int64(n)
	if err != nil {
		return
	}
	// From here on br is empty and c is read directly.
	bytesUp, bytesDown := p.splice(c, up)
	d.BytesUp += bytesUp
	d.BytesDown = bytesDown
}

// copyBuffer is the size of the buffers that carry bulk data.
const copyBuffer = 256 << 10

// copyBuffers recycles the buffers of tunnels and forwarded responses: a
// burst of short connections would otherwise allocate, and make the
// collector sweep, two of them per connection.
var copyBuffers = sync.Pool{New: func() any { return new([copyBuffer]byte) }}

// splice copies both ways between client and up until both directions are
// done, and returns the bytes carried each way.
func (p *Proxy) splice(client, up net.Conn) (bytesUp, bytesDown int64) {
	var last atomic.Int64 // unix nanoseconds of the last byte either way
	last.Store(time.Now().UnixNano())
	type result struct {
		n    int64
		toUp bool
	}
	done := make(chan result, 2)
	go func() { done <- result{p.pipe(up, client, &last), true} }()
	go func() { done <- result{p.pipe(client, up, &last), false} }()
	for range 2 {
		r := <-done
		if r.toUp {
			bytesUp = r.n
		} else {
			bytesDown = r.n
		}
	}
	return bytesUp, bytesDown
}

// pipe copies src to dst and returns the bytes written. On a clean end of
// src it half-closes dst, so that the other direction can still carry an
// answer; on anything else it closes both, which ends the other direction
// too. A direction that is only quiet is kept while the other one moves:
// the tunnel idles out only when neither has moved for IdleTimeout.
func (p *Proxy) pipe(dst, src net.Conn, last *atomic.Int64) int64 {
	pb := copyBuffers.Get().(*[copyBuffer]byte)
	defer copyBuffers.Put(pb)
	buf := pb[:]
	var n int64
	// Deadlines are moved at most every quarter of the idle timeout (a
	// second at most): re-arming two timers per read is a measurable
	// share of a bulk transfer's cost, and a quarter keeps a busy tunnel
	// far from its deadlines.
	rearm := min(time.Second, p.idleTimeout/4)
	var armed time.Time
	for {
		now := time.Now()
		if now.Sub(armed) >= rearm {
			_ = src.SetReadDeadline(now.Add(p.idleTimeout))
			_ = dst.SetWriteDeadline(now.Add(p.idleTimeout))
			armed = now
		}
		nr, rerr := src.Read(buf)
		if nr > 0 {
			last.Store(time.Now().UnixNano())
			nw, werr := dst.Write(buf[:nr])
			n += int64(nw)
			if werr != nil {
				src.Close()
				dst.Close()
				return n
			}
		}
		if rerr == nil {
			continue
		}
		if isTimeout(rerr) && time.Since(time.Unix(0, last.Load())) < p.idleTimeout {
			armed = time.Time{} // the other direction is busy: wait again
			continue
		}
		if rerr == io.EOF && closeWrite(dst) == nil {
			return n
		}
		src.Close()
		dst.Close()
		return n
	}
}

// closeWrite half-closes c when it can.
func closeWrite(c net.Conn) error {
	if cw, ok := c.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return errors.ErrUnsupported
}

func isTimeout(err error) bool { return errors.Is(err, os.ErrDeadlineExceeded) }

// reasonIntercepted marks a tunnel whose TLS the proxy ended to swap
// secrets in.
const reasonIntercepted = "allowed, secrets swapped in"

// replayConn reads first, then the connection: the ClientHello the proxy
// already took off the wire is handed on to the interceptor.
type replayConn struct {
	net.Conn
	first []byte
}

func (r *replayConn) Read(b []byte) (int, error) {
	if len(r.first) > 0 {
		n := copy(b, r.first)
		r.first = r.first[n:]
		return n, nil
	}
	return r.Conn.Read(b)
}
