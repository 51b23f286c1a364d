package egress

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/textproto"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// standardMethods are the methods a forwarded request may use. CONNECT is
// handled apart; TRACE echoes headers back and has no use here.
var standardMethods = map[string]bool{
	http.MethodGet:     true,
	http.MethodHead:    true,
	http.MethodPost:    true,
	http.MethodPut:     true,
	http.MethodPatch:   true,
	http.MethodDelete:  true,
	http.MethodOptions: true,
}

// hopHeaders are the hop-by-hop headers of RFC 9110 section 7.6.1, and the
// older ones still sent. Every Proxy-* header goes as well.
var hopHeaders = []string{
	"Connection",
	"Keep-Alive",
	"Te",
	"Trailer",
	"Transfer-Encoding",
	"Upgrade",
}

// forward handles one plain HTTP request in absolute form. It reports
// whether c may carry another request.
func (p *Proxy) forward(ctx context.Context, c net.Conn, req *http.Request, sb Sandbox, start time.Time) (keepAlive bool) {
	// req.Body is not closed here: closing it drains it, and a refused
	// request's body is not worth waiting for. c is closed instead.
	d := Decision{SandboxID: sb.ID, Method: req.Method}
	defer func() {
		d.Duration = time.Since(start)
		p.decide(ctx, d)
	}()

	if ref := checkRequest(req); ref != nil {
		// The target was never checked; name it for the log as best it
		// can be named.
		if h, _, err := splitAuthority(req.URL.Host); err == nil && h != "" {
			d.Host = displayHost(h)
		}
		return p.refuseRequest(c, req, ref, &d)
	}
	rawHost, rawPort, err := splitAuthority(req.URL.Host)
	if err != nil {
		// url.Parse took userinfo apart already; this is junk after "]".
		return p.refuseRequest(c, req, refuse(http.StatusBadRequest, reasonBadTarget), &d)
	}
	addrs, ref := p.checkTarget(ctx, sb, rawHost, rawPort, 80, &d)
	if ref != nil {
		return p.refuseRequest(c, req, ref, &d)
	}
	return p.roundTrip(ctx, c, req, addrs, &d)
}

// checkRequest refuses what is wrong with a request before its target is
// looked at.
func checkRequest(req *http.Request) *refusal {
	if req.ProtoMajor != 1 {
		// "PRI * HTTP/2.0", the h2c preface, lands here.
		return refuse(http.StatusHTTPVersionNotSupported, reasonVersion)
	}
	if !req.URL.IsAbs() || strings.HasPrefix(req.RequestURI, "/") {
		// The proxy serves nothing of its own, so a request for a path on
		// it, with whatever Host header, has nowhere to go.
		return refuse(http.StatusBadRequest, reasonOriginForm)
	}
	if req.URL.Scheme != "http" {
		// https:// in absolute form would ask the proxy to speak TLS for
		// the client; clients use CONNECT for that.
		return refuse(http.StatusBadRequest, reasonScheme)
	}
	if req.URL.User != nil {
		return refuse(http.StatusForbidden, reasonUserinfo)
	}
	if strings.Contains(req.RequestURI, "#") || req.URL.Opaque != "" {
		return refuse(http.StatusBadRequest, reasonBadTarget)
	}
	if !standardMethods[req.Method] {
		return refuse(http.StatusMethodNotAllowed, reasonMethod)
	}
	// An upgraded connection (WebSocket, h2c) would carry a protocol the
	// proxy cannot check past its first request.
	if len(req.Header.Values("Upgrade")) > 0 || len(req.Header.Values("Http2-Settings")) > 0 {
		return refuse(http.StatusForbidden, reasonUpgrade)
	}
	return nil
}

// refuseRequest answers a refused request and reports whether c may carry
// another one: only when this one had no body, whose unread bytes would
// otherwise be taken for the next request.
func (p *Proxy) refuseRequest(c net.Conn, req *http.Request, ref *refusal, d *Decision) bool {
	d.Reason = ref.reason
	keep := req.ContentLength == 0 && !req.Close && ref.status != http.StatusHTTPVersionNotSupported
	p.writeRefusal(c, ref.status, ref.reason, req.Method == http.MethodHead, !keep)
	return keep
}

// roundTrip sends req to exactly the checked addresses and streams the
// answer back to c.
//
// It speaks HTTP/1.1 to the upstream itself, on one connection made for
// this request alone (nothing is pooled across requests, so no connection
// made for one checked address serves another): the request is written
// while the answer is read, as a transport does, and a large body of known
// length moves from socket to socket in the kernel (splice) when c allows
// it, without passing through the daemon's memory.
func (p *Proxy) roundTrip(ctx context.Context, c net.Conn, req *http.Request, addrs []netip.Addr, d *Decision) bool {
	hostport := d.Host
	if d.Port != 80 {
		hostport = net.JoinHostPort(d.Host, strconv.Itoa(d.Port))
	}
	body := &countingBody{r: req.Body, closed: make(chan struct{})}
	out := &http.Request{
		Method: req.Method,
		URL: &url.URL{
			Scheme:   "http",
			Host:     hostport,
			Path:     req.URL.Path,
			RawPath:  req.URL.RawPath,
			RawQuery: req.URL.RawQuery,
		},
		Proto:         "HTTP/1.1",
		ProtoMajor:    1,
		ProtoMinor:    1,
		Header:        cleanHeader(req.Header),
		ContentLength: req.ContentLength,
		Host:          hostport,
		Close:         true, // one request per upstream connection
	}
	if req.ContentLength != 0 {
		out.Body = body
	} else {
		body.Close()
	}
	// Without a User-Agent the request would carry Go's own; the upstream
	// should see the client's, or none.
	if _, ok := out.Header["User-Agent"]; !ok {
		out.Header["User-Agent"] = []string{""}
	}

	fail := func(err error) bool {
		p.log.DebugContext(ctx, "egress upstream failed", logSandbox, d.SandboxID, logHost, d.Host, logErr, err)
		d.BytesUp = body.n.Load()
		d.Reason = reasonUpstream
		p.writeRefusal(c, http.StatusBadGateway, reasonUpstream, req.Method == http.MethodHead, true)
		return false
	}
	up, addr, err := p.dial(ctx, addrs, d.Port)
	d.Addr = addr
	if err != nil {
		return fail(err)
	}
	defer up.Close()
	stop := context.AfterFunc(ctx, func() { up.Close() })
	defer stop()

	// The client holds its body back for "Expect: 100-continue" (the
	// header is not forwarded); every check has passed, so let it come.
	if strings.EqualFold(req.Header.Get("Expect"), "100-continue") && req.ContentLength != 0 {
		_ = c.SetWriteDeadline(time.Now().Add(p.headerTimeout))
		_, _ = io.WriteString(c, "HTTP/1.1 100 Continue\r\n\r\n")
		_ = c.SetWriteDeadline(time.Time{})
	}

	// The request goes out while the answer is read: an upstream may
	// answer before it has read the whole body. The answer's header must
	// come within IdleTimeout of the request's end.
	var (
		deadlineMu sync.Mutex
		headerRead bool
	)
	wrote := make(chan error, 1)
	go func() {
		bw := bufio.NewWriterSize(up, 16<<10)
		err := out.Write(bw)
		if err == nil {
			err = bw.Flush()
		}
		body.Close()
		deadlineMu.Lock()
		switch {
		case headerRead:
		case err == nil:
			_ = up.SetReadDeadline(time.Now().Add(p.idleTimeout))
		default:
			// The request did not all go: an upstream that stopped reading
			// may have answered already, but no answer is coming later.
			_ = up.SetReadDeadline(time.Now().Add(time.Second))
		}
		deadlineMu.Unlock()
		wrote <- err
	}()
	lim := &headerLimiter{r: up, n: maxHeaderBytes}
	br := bufio.NewReaderSize(lim, 16<<10)
	var resp *http.Response
	for {
		if resp, err = http.ReadResponse(br, out); err != nil {
			break
		}
		if resp.StatusCode >= 200 || resp.StatusCode == http.StatusSwitchingProtocols {
			break
		}
		// An interim answer (100 Continue, 103 Early Hints) is dropped, as
		// a transport drops it; the header limit covers them all.
	}
	deadlineMu.Lock()
	headerRead = true
	_ = up.SetReadDeadline(time.Time{})
	deadlineMu.Unlock()
	lim.set(-1)
	if err == nil && resp.StatusCode == http.StatusSwitchingProtocols {
		// No Upgrade was sent; an upstream that switches anyway gets cut.
		err = errSwitched
	}
	if err != nil {
		up.Close() // ends the request's writing too
		<-wrote
		return fail(err)
	}
	d.Allowed, d.Reason = true, reasonAllowed

	down := &countingBody{r: resp.Body, closed: make(chan struct{})}
	chunked := len(resp.TransferEncoding) > 0 && resp.TransferEncoding[0] == "chunked"
	// A body of unknown length without chunking ends when the connection
	// does; so does any body for an HTTP/1.0 client, which cannot take
	// chunks.
	closeAfter := req.Close || (resp.ContentLength < 0 && (!chunked || req.ProtoMinor == 0))
	length := resp.ContentLength
	if req.Method == http.MethodHead {
		// The reader reports a HEAD body as empty; the client should still
		// learn the length the upstream announced.
		closeAfter = req.Close
		length = -1
		if cl, err := strconv.ParseInt(resp.Header.Get("Content-Length"), 10, 64); err == nil && cl >= 0 {
			length = cl
		}
	}
	outResp := &http.Response{
		Status:        resp.Status,
		StatusCode:    resp.StatusCode,
		Proto:         "HTTP/1.1",
		ProtoMajor:    1,
		ProtoMinor:    1,
		Header:        cleanHeader(resp.Header),
		Body:          down,
		ContentLength: length,
		Close:         closeAfter,
		Request:       req,
	}
	if chunked && !closeAfter {
		outResp.TransferEncoding = []string{"chunked"}
	}
	// Through a large buffer: the body then moves in big reads and writes
	// instead of 32 KiB pairs.
	bw := bufWriters.Get().(*bufio.Writer)
	// To a relay (a unix socket to gVisor's guest) every write arrives in
	// the sandbox as one costly read: the body goes through bw's 256 KiB,
	// never through c's ReadFrom, which bufio would call when its buffer
	// is empty and which moves 32 KiB (a copy) or 64 KiB (a splice) at a
	// time.
	_, relay := c.(*net.UnixConn)
	if relay {
		bw.Reset(struct{ io.Writer }{c})
	} else {
		bw.Reset(c)
	}
	var werr error
	if rf, ok := c.(io.ReaderFrom); ok && !relay && req.Method != http.MethodHead && !chunked && length >= spliceMin {
		werr = p.spliceBody(bw, rf, outResp, br, up, length, &d.BytesDown)
	} else {
		werr = outResp.Write(bw)
		if werr == nil {
			werr = bw.Flush()
		}
		d.BytesDown = down.n.Load()
	}
	bw.Reset(nil)
	bufWriters.Put(bw)

	// The request's body may still be on its way; until it is sent, the
	// client's stream must not be read for a next request.
	select {
	case <-wrote:
	case <-ctx.Done():
		return false
	case <-time.After(p.headerTimeout):
		return false
	}
	d.BytesUp = body.n.Load()
	return werr == nil && !closeAfter && (req.ContentLength == 0 || body.eof.Load())
}

// spliceMin is the least body length worth splicing.
const spliceMin = 64 << 10

// spliceBody writes resp's header to bw, then its body of length bytes:
// what br already holds, then the rest straight from up to the client
// (rf), which splices socket to socket. *down counts the body's bytes.
func (p *Proxy) spliceBody(bw *bufio.Writer, rf io.ReaderFrom, resp *http.Response, br *bufio.Reader, up net.Conn, length int64, down *int64) error {
	// The header alone: written as the answer to a HEAD, which announces
	// the length and carries no body.
	hdr := *resp
	hdr.Body = nil
	hdr.Request = &http.Request{Method: http.MethodHead}
	if err := hdr.Write(bw); err != nil {
		return err
	}
	head, _ := br.Peek(int(min(int64(br.Buffered()), length)))
	if _, err := bw.Write(head); err != nil {
		return err
	}
	*down = int64(len(head))
	if err := bw.Flush(); err != nil {
		return err
	}
	n, err := rf.ReadFrom(&io.LimitedReader{R: up, N: length - *down})
	*down += n
	if err == nil && *down < length {
		err = io.ErrUnexpectedEOF
	}
	return err
}

var errSwitched = errors.New("upstream switched protocols unasked")

// bufWriters recycles the large buffered writers of forwarded responses.
var bufWriters = sync.Pool{New: func() any { return bufio.NewWriterSize(nil, copyBuffer) }}

// cleanHeader copies h without hop-by-hop headers, the headers that
// Connection names, Proxy-* headers (credentials for this proxy must not
// reach anyone else) and Expect, which the proxy answers itself. Names are
// compared without case, in case a key escaped canonicalisation.
func cleanHeader(h http.Header) http.Header {
	drop := map[string]bool{"expect": true}
	for _, k := range hopHeaders {
		drop[strings.ToLower(k)] = true
	}
	for k, vs := range h {
		if !strings.EqualFold(k, "Connection") {
			continue
		}
		for _, v := range vs {
			for name := range strings.SplitSeq(v, ",") {
				drop[strings.ToLower(textproto.TrimString(name))] = true
			}
		}
	}
	out := make(http.Header, len(h))
	for k, vs := range h {
		lk := strings.ToLower(k)
		if drop[lk] || strings.HasPrefix(lk, "proxy-") {
			continue
		}
		out[k] = append([]string(nil), vs...)
	}
	return out
}

// countingBody counts what is read through it and tells when it is closed
// and whether it reached its end.
type countingBody struct {
	r      io.ReadCloser
	n      atomic.Int64
	eof    atomic.Bool
	once   sync.Once
	closed chan struct{}
}

func (b *countingBody) Read(p []byte) (int, error) {
	n, err := b.r.Read(p)
	b.n.Add(int64(n))
	if err == io.EOF {
		b.eof.Store(true)
	}
	return n, err
}

func (b *countingBody) Close() error {
	b.once.Do(func() { close(b.closed) })
	return nil
}
