package mitm

import (
	"bufio"
	"compress/gzip"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/textproto"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/agentbox/agentbox/internal/errdefs"
	"github.com/agentbox/agentbox/internal/policy"
)

// Defaults of a binding, as in policy.SecretBinding.
const (
	defaultHeader = "Authorization"
	defaultFormat = policy.SecretPlaceholder
)

var (
	// ErrSNIMismatch refuses a client whose TLS server name is not the
	// host its tunnel was allowed for.
	ErrSNIMismatch = fmt.Errorf("sni mismatch: %w", errdefs.ErrPolicyDenied)
	// ErrRefused marks a request refused inside an intercepted tunnel
	// (an upgrade, CONNECT, h2c, another host, an encoding that cannot
	// be redacted).
	ErrRefused = fmt.Errorf("request refused: %w", errdefs.ErrPolicyDenied)
	// ErrNotIntercepted refuses a tunnel that no secret is bound to.
	ErrNotIntercepted = fmt.Errorf("no secret bound: %w", errdefs.ErrInvalid)
)

// Binding is one secret as one sandbox may use it.
type Binding struct {
	// Name is the secret's name ("GITHUB_TOKEN").
	Name string
	// Placeholder is what the sandbox holds instead of the value (see
	// NewPlaceholder).
	Placeholder string
	// Value is the real secret (secrets.Box.Reveal).
	Value []byte
	// Hosts are the canonical patterns the secret is bound to.
	Hosts []policy.HostPattern
	// Port, when not 0, replaces the patterns' ports.
	Port int
	// Header is the request header the value goes in; default
	// "Authorization".
	Header string
	// Format is the header value with {{value}} standing for the secret;
	// default "{{value}}".
	Format string
}

// binding is a Binding made ready for the relay.
type binding struct {
	hosts []policy.HostPattern
	port  int
	// header is in canonical MIME form.
	header string
	// fake is Format with the placeholder, real with the value.
	fake, real string
}

func (b *binding) matches(host string, port int) bool {
	if b.port != 0 && port != b.port {
		return false
	}
	for _, p := range b.hosts {
		if b.port != 0 {
			p.Ports = []int{port}
		}
		if p.Matches(host, port) {
			return true
		}
	}
	return false
}

// Stats count one intercepted tunnel.
type Stats struct {
	// BytesUp and BytesDown are the bytes read from and written to the
	// sandbox's connection (TLS records included), as for a plain tunnel.
	BytesUp, BytesDown int64
	// Requests is the number of requests relayed upstream.
	Requests int
	// Swaps is the number of header values the real secret was put in.
	Swaps int
}

// Swapper swaps one sandbox's placeholders for real values. It is safe for
// concurrent use: each Serve is one tunnel.
type Swapper struct {
	ca       *CA
	bindings []binding
	// redact writes placeholders over every bound value, whichever host
	// it came from.
	redact []replacement
}

// NewSwapper returns a Swapper for one sandbox's bindings, terminating TLS
// with leaves from ca. A binding without a placeholder, a value, a host, or
// with a value that could break a header, is refused.
func NewSwapper(ca *CA, bindings []Binding) (*Swapper, error) {
	if ca == nil {
		return nil, errdefs.Invalid("swapper: no CA")
	}
	s := &Swapper{ca: ca}
	for _, b := range bindings {
		if err := checkBinding(b); err != nil {
			return nil, fmt.Errorf("secret %s: %w", b.Name, err)
		}
		header, format := b.Header, b.Format
		if header == "" {
			header = defaultHeader
		}
		if format == "" {
			format = defaultFormat
		}
		s.bindings = append(s.bindings, binding{
			hosts:  b.Hosts,
			port:   b.Port,
			header: textproto.CanonicalMIMEHeaderKey(header),
			fake:   strings.ReplaceAll(format, policy.SecretPlaceholder, b.Placeholder),
			real:   strings.ReplaceAll(format, policy.SecretPlaceholder, string(b.Value)),
		})
		s.redact = append(s.redact, replacement{old: append([]byte(nil), b.Value...), new: []byte(b.Placeholder)})
	}
	s.redact = sortReplacements(s.redact)
	return s, nil
}

func checkBinding(b Binding) error {
	switch {
	case !strings.HasPrefix(b.Placeholder, PlaceholderPrefix):
		return errdefs.Invalid("placeholder must start with %s", PlaceholderPrefix)
	case len(b.Value) == 0:
		return errdefs.Invalid("empty value")
	case strings.ContainsAny(string(b.Value), "\r\n\x00"):
		return errdefs.Invalid("value holds a line break or NUL")
	case strings.Contains(string(b.Value), b.Placeholder) || strings.Contains(b.Placeholder, string(b.Value)):
		return errdefs.Invalid("value and placeholder overlap")
	case len(b.Hosts) == 0:
		return errdefs.Invalid("no hosts")
	case b.Port < 0 || b.Port > 65535:
		return errdefs.Invalid("port %d out of range", b.Port)
	case b.Format != "" && !strings.Contains(b.Format, policy.SecretPlaceholder):
		return errdefs.Invalid("format %q lacks %s", b.Format, policy.SecretPlaceholder)
	case strings.ContainsAny(b.Format, "\r\n\x00"):
		return errdefs.Invalid("format holds a line break or NUL")
	case b.Header != "" && !validHeaderName(b.Header):
		return errdefs.Invalid("header %q is not a header name", b.Header)
	}
	return nil
}

// Intercepts reports whether any secret is bound to the canonical host on
// port: only those tunnels are terminated.
func (s *Swapper) Intercepts(host string, port int) bool {
	for i := range s.bindings {
		if s.bindings[i].matches(host, port) {
			return true
		}
	}
	return false
}

// Serve relays one tunnel to host:port (canonical, already allowed):
// it terminates the sandbox's TLS on client with a leaf for host, dials
// the upstream with dialUpstream and verifies it as host against
// upstreamTLS.RootCAs (nil: the system roots), then relays HTTP/1.1
// requests one by one, swapping placeholders in bound headers and
// redacting values from responses. It returns when either side closes, a
// request is refused, or ctx ends; it closes the upstream connection but
// not client.
func (s *Swapper) Serve(ctx context.Context, client net.Conn, host string, port int, dialUpstream func(context.Context) (net.Conn, error), upstreamTLS *tls.Config) (st Stats, err error) {
	if !s.Intercepts(host, port) {
		return st, fmt.Errorf("%s:%d: %w", host, port, ErrNotIntercepted)
	}
	cc := &countConn{Conn: client}
	defer func() { st.BytesUp, st.BytesDown = cc.read.Load(), cc.written.Load() }()
	// Ending ctx unblocks every read and write on client; the upstream is
	// closed below.
	stopClient := context.AfterFunc(ctx, func() { _ = client.SetDeadline(time.Unix(1, 0)) })
	defer stopClient()

	down := tls.Server(cc, &tls.Config{
		MinVersion: tls.VersionTLS12,
		NextProtos: []string{"http/1.1"},
		GetCertificate: func(hi *tls.ClientHelloInfo) (*tls.Certificate, error) {
			if hi.ServerName != host {
				return nil, ErrSNIMismatch
			}
			return s.ca.Leaf(host)
		},
	})
	if err := down.HandshakeContext(ctx); err != nil {
		if errors.Is(err, ErrSNIMismatch) {
			return st, fmt.Errorf("client handshake for %s: %w", host, ErrSNIMismatch)
		}
		return st, fmt.Errorf("client handshake for %s: %w", host, err)
	}
	if p := down.ConnectionState().NegotiatedProtocol; p != "" && p != "http/1.1" {
		return st, fmt.Errorf("client protocol %q: %w", p, ErrRefused)
	}

	raw, err := dialUpstream(ctx)
	if err != nil {
		writeError(down, http.StatusBadGateway, "upstream unreachable")
		return st, fmt.Errorf("dialing %s:%d: %w", host, port, err)
	}
	defer raw.Close()
	stopUp := context.AfterFunc(ctx, func() { raw.Close() })
	defer stopUp()
	var cfg *tls.Config
	if upstreamTLS != nil {
		cfg = upstreamTLS.Clone()
	} else {
		cfg = &tls.Config{}
	}
	cfg.ServerName = host
	cfg.InsecureSkipVerify = false
	cfg.NextProtos = []string{"http/1.1"}
	if cfg.MinVersion < tls.VersionTLS12 {
		cfg.MinVersion = tls.VersionTLS12
	}
	up := tls.Client(raw, cfg)
	if err := up.HandshakeContext(ctx); err != nil {
		writeError(down, http.StatusBadGateway, "upstream tls handshake failed")
		return st, fmt.Errorf("upstream handshake with %s:%d: %w", host, port, err)
	}

	r := &relay{s: s, host: host, port: port, down: down, up: up,
		downR: bufio.NewReader(down), downW: bufio.NewWriter(down),
		upR: bufio.NewReader(up), upW: bufio.NewWriter(up), st: &st}
	err = r.run(ctx)
	if ctx.Err() != nil && err != nil {
		err = fmt.Errorf("%w (%w)", ctx.Err(), err)
	}
	return st, err
}

// relay is one intercepted tunnel after both handshakes.
type relay struct {
	s          *Swapper
	host       string
	port       int
	down, up   net.Conn
	downR, upR *bufio.Reader
	downW, upW *bufio.Writer
	st         *Stats
}

func (r *relay) run(ctx context.Context) error {
	for {
		req, err := http.ReadRequest(r.downR)
		if err != nil {
			if errors.Is(err, io.EOF) || ctx.Err() != nil {
				return nil
			}
			writeError(r.down, http.StatusBadRequest, "malformed request")
			return fmt.Errorf("reading request: %w", err)
		}
		if status, reason := r.check(req); reason != "" {
			writeError(r.down, status, reason)
			return fmt.Errorf("%s %s: %s: %w", req.Method, r.host, reason, ErrRefused)
		}
		r.swap(req)
		// No encoding the redactor cannot read; gzip is still decoded
		// below for servers that ignore this.
		req.Header.Set("Accept-Encoding", "identity")
		// Present and empty: req.Write then adds no User-Agent of its own.
		if _, ok := req.Header["User-Agent"]; !ok {
			req.Header["User-Agent"] = nil
		}
		req.Trailer = nil
		r.st.Requests++

		// The request is written while the response is read, so that a
		// 100 Continue or an early error reaches the client.
		werr := make(chan error, 1)
		go func() {
			err := req.Write(r.upW)
			if err == nil {
				err = r.upW.Flush()
			}
			werr <- err
		}()
		closing, err := r.response(req)
		if err != nil || closing {
			// Unblock the writer if it still waits on either side.
			r.up.Close()
			_ = r.down.SetReadDeadline(time.Unix(1, 0))
			<-werr
			return err
		}
		if err := <-werr; err != nil {
			return fmt.Errorf("writing request: %w", err)
		}
	}
}

// check refuses what cannot be relayed with the swap: a protocol switch
// would carry bytes the relay does not parse, and a request for another
// host would carry the secret there.
func (r *relay) check(req *http.Request) (int, string) {
	switch {
	case req.ProtoMajor != 1 || req.Method == "PRI":
		return http.StatusHTTPVersionNotSupported, "only HTTP/1.1 is relayed"
	case req.Method == http.MethodConnect:
		return http.StatusMethodNotAllowed, "CONNECT inside an intercepted tunnel"
	case req.Header.Get("Upgrade") != "" || headerHasToken(req.Header, "Connection", "upgrade"):
		return http.StatusNotImplemented, "protocol upgrade through credential injection"
	case req.Header.Get("Http2-Settings") != "":
		return http.StatusNotImplemented, "h2c through credential injection"
	case !r.sameHost(req.Host) || (req.URL.Host != "" && !r.sameHost(req.URL.Host)):
		return http.StatusMisdirectedRequest, "request for another host"
	}
	return 0, ""
}

// sameHost reports whether a Host header names the tunnel's host and port.
func (r *relay) sameHost(hostport string) bool {
	h, p := hostport, ""
	if i := strings.LastIndexByte(hostport, ':'); i >= 0 && !strings.Contains(hostport[i:], "]") {
		h, p = hostport[:i], hostport[i+1:]
	}
	if c, err := policy.CanonicalHost(h); err != nil || c != r.host {
		return false
	}
	if p == "" {
		return r.port == 443
	}
	return p == strconv.Itoa(r.port)
}

// swap puts the real value in each bound header that holds exactly the
// placeholder in its format. Placeholders anywhere else go out unchanged.
func (r *relay) swap(req *http.Request) {
	for i := range r.s.bindings {
		b := &r.s.bindings[i]
		if !b.matches(r.host, r.port) {
			continue
		}
		vals := req.Header[b.header]
		for j := range vals {
			if vals[j] == b.fake {
				vals[j] = b.real
				r.st.Swaps++
			}
		}
	}
}

// response relays the responses to req (informational ones, then the
// final one) with the values redacted. closing says that the connection
// ends after it.
func (r *relay) response(req *http.Request) (closing bool, err error) {
	for {
		resp, err := http.ReadResponse(r.upR, req)
		if err != nil {
			writeError(r.down, http.StatusBadGateway, "bad upstream response")
			return true, fmt.Errorf("reading response: %w", err)
		}
		if resp.StatusCode == http.StatusSwitchingProtocols {
			resp.Body.Close()
			writeError(r.down, http.StatusBadGateway, "upstream switched protocols")
			return true, fmt.Errorf("upstream switched protocols: %w", ErrRefused)
		}
		header := r.redactHeader(resp.Header)
		if resp.StatusCode >= 100 && resp.StatusCode < 200 {
			resp.Body.Close()
			fmt.Fprintf(r.downW, "HTTP/1.1 %03d %s\r\n", resp.StatusCode, http.StatusText(resp.StatusCode))
			_ = header.Write(r.downW)
			r.downW.WriteString("\r\n")
			if err := r.downW.Flush(); err != nil {
				return true, fmt.Errorf("writing response: %w", err)
			}
			continue
		}
		return r.final(req, resp, header)
	}
}

func (r *relay) final(req *http.Request, resp *http.Response, header http.Header) (bool, error) {
	defer resp.Body.Close()
	resp.Header = header
	resp.Header.Del("Trailer")
	resp.Trailer = nil
	resp.Proto, resp.ProtoMajor, resp.ProtoMinor = "HTTP/1.1", 1, 1
	resp.Status = ""
	if resp.Body != http.NoBody {
		var body io.Reader = resp.Body
		switch enc := strings.ToLower(strings.TrimSpace(resp.Header.Get("Content-Encoding"))); enc {
		case "", "identity":
		case "gzip", "x-gzip":
			zr, err := gzip.NewReader(resp.Body)
			if err != nil {
				writeError(r.down, http.StatusBadGateway, "bad gzip from upstream")
				return true, fmt.Errorf("response gzip: %w", err)
			}
			body = zr
			resp.Header.Del("Content-Encoding")
		default:
			writeError(r.down, http.StatusBadGateway, "upstream content encoding cannot be redacted")
			return true, fmt.Errorf("content encoding %q: %w", enc, ErrRefused)
		}
		// Redaction changes the length: the body is re-framed.
		resp.Body = &flushingReader{r: newRedactor(body, r.s.redact), w: r.downW}
		resp.ContentLength = -1
		resp.Header.Del("Content-Length")
		if req.ProtoAtLeast(1, 1) {
			resp.TransferEncoding = []string{"chunked"}
		} else {
			resp.TransferEncoding = nil
			resp.Close = true
		}
	}
	closing := resp.Close || req.Close
	if err := resp.Write(r.downW); err != nil {
		return true, fmt.Errorf("writing response: %w", err)
	}
	if err := r.downW.Flush(); err != nil {
		return true, fmt.Errorf("writing response: %w", err)
	}
	return closing, nil
}

// redactHeader returns h with every bound value replaced, in names and
// values alike.
func (r *relay) redactHeader(h http.Header) http.Header {
	out := make(http.Header, len(h))
	for k, vs := range h {
		k = redactString(k, r.s.redact)
		for _, v := range vs {
			out[k] = append(out[k], redactString(v, r.s.redact))
		}
	}
	return out
}

// flushingReader flushes w before each read of r, so that a streamed body
// reaches the client as it comes rather than when w's buffer fills.
type flushingReader struct {
	r io.Reader
	w *bufio.Writer
}

func (f *flushingReader) Read(p []byte) (int, error) {
	if err := f.w.Flush(); err != nil {
		return 0, err
	}
	return f.r.Read(p)
}

func (f *flushingReader) Close() error { return nil }

// writeError answers the client with status and reason and asks it to
// close. Errors are ignored: the tunnel ends anyway.
func writeError(w io.Writer, status int, reason string) {
	body := "agentbox egress: " + reason + "\n"
	fmt.Fprintf(w, "HTTP/1.1 %03d %s\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s",
		status, http.StatusText(status), len(body), body)
}

// headerHasToken reports whether a comma-separated header holds token.
func headerHasToken(h http.Header, name, token string) bool {
	for _, v := range h.Values(name) {
		for t := range strings.SplitSeq(v, ",") {
			if strings.EqualFold(strings.TrimSpace(t), token) {
				return true
			}
		}
	}
	return false
}

// validHeaderName reports whether s is an RFC 9110 token.
func validHeaderName(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0 {
			continue
		}
		return false
	}
	return true
}

// countConn counts the bytes read from and written to a connection.
type countConn struct {
	net.Conn
	read, written atomic.Int64
}

func (c *countConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	c.read.Add(int64(n))
	return n, err
}

func (c *countConn) Write(b []byte) (int, error) {
	n, err := c.Conn.Write(b)
	c.written.Add(int64(n))
	return n, err
}
