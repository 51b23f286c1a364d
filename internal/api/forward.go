package api

// Nodes sharing a store each serve any object: a request about a
// workspace, sandbox or candidate that another node owns is forwarded to
// that node (a reverse proxy to the address it registered), and a new
// workspace is made on the least loaded live node. Streams (exec output,
// NDJSON in both directions, server-sent events, WebSocket shells) pass
// through as they come.
//
// The forwarding node vouches for the caller, whose token never travels
// on: the forwarded request carries an HMAC-SHA256, under a key the nodes
// share through the store, of its method, path and query, the time, a
// nonce, the two nodes and the principal the first node authenticated.
// The owner accepts it within forwardSkew of its own clock, addressed to
// itself, once (a nonce it has seen within the window is a replay), and
// never forwards it again (a request that reaches a node which no longer
// owns the object fails rather than loop). The body is not signed: it
// streams, and a party that can change it in flight could change the
// caller's own request as well; nodes talk over a network their operator
// trusts as much as the one clients use.

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/agentbox/agentbox/internal/apitypes"
	"github.com/agentbox/agentbox/internal/errdefs"
	"github.com/agentbox/agentbox/internal/manager"
)

// Headers of a forwarded request.
const (
	hdrFrom      = "X-Agentbox-Node-From"
	hdrTo        = "X-Agentbox-Node-To"
	hdrTime      = "X-Agentbox-Node-Time"
	hdrPrincipal = "X-Agentbox-Principal"
	hdrNonce     = "X-Agentbox-Node-Nonce"
	hdrSig       = "X-Agentbox-Node-Signature"
	// hdrServedBy names, in every reply to a forwarded request, the node
	// that served it.
	hdrServedBy = "X-Agentbox-Node"
)

// ForwardIdleConns is how many idle connections a node keeps to each
// other node it forwards to.
const ForwardIdleConns = 4

// forwardSkew is how far a forwarded request's time may be from the
// receiving node's clock.
const forwardSkew = 60 * time.Second

// Principals: who the first node let in.
const (
	principalToken = "token" // the bearer token
	principalLocal = "local" // the unix socket, no token configured
)

type ctxKey int

const forwardedKey ctxKey = iota

// forwarded reports whether r came from another node.
func forwarded(r *http.Request) bool {
	v, _ := r.Context().Value(forwardedKey).(bool)
	return v
}

// forwarder proxies requests to other nodes.
type forwarder struct {
	self string
	key  []byte
	// seen holds the nonces of the forwarded requests taken, each until
	// its request falls out of the clock window.
	seenMu  sync.Mutex
	seen    map[string]time.Time
	sweepAt int
	mu      sync.Mutex
	// proxies by node address, and the transports under them.
	proxies    map[string]*httputil.ReverseProxy
	transports map[string]http.RoundTripper
}

// sign returns the signature of a forwarded request.
func (f *forwarder) sign(method, uri, at, nonce, from, to, principal string) string {
	mac := hmac.New(sha256.New, f.key)
	for _, s := range []string{method, uri, at, nonce, from, to, principal} {
		mac.Write([]byte(s))
		mac.Write([]byte{0})
	}
	return hex.EncodeToString(mac.Sum(nil))
}

// verify checks a request that says it was forwarded by another node and
// returns the principal it vouches for.
func (f *forwarder) verify(r *http.Request, now time.Time) (string, error) {
	if f == nil || len(f.key) == 0 {
		return "", errors.New("this daemon takes no forwarded requests")
	}
	at, from, to, principal := r.Header.Get(hdrTime), r.Header.Get(hdrFrom), r.Header.Get(hdrTo), r.Header.Get(hdrPrincipal)
	nonce := r.Header.Get(hdrNonce)
	sec, err := strconv.ParseInt(at, 10, 64)
	if err != nil {
		return "", errors.New("forwarded request without a valid time")
	}
	if b, err := hex.DecodeString(nonce); err != nil || len(b) != nonceBytes {
		return "", fmt.Errorf("forwarded request from node %s without a valid nonce", from)
	}
	sent := time.Unix(sec, 0)
	if d := now.Sub(sent); d > forwardSkew || d < -forwardSkew {
		return "", fmt.Errorf("forwarded request from node %s is %s away from this node's clock", from, d.Round(time.Second))
	}
	if to != f.self {
		return "", fmt.Errorf("forwarded request is for node %s, not this one", to)
	}
	want := f.sign(r.Method, r.URL.RequestURI(), at, nonce, from, to, principal)
	if !hmac.Equal([]byte(want), []byte(r.Header.Get(hdrSig))) {
		return "", fmt.Errorf("forwarded request from node %s has a wrong signature", from)
	}
	if !f.firstSight(nonce, sent.Add(forwardSkew), now) {
		return "", fmt.Errorf("forwarded request from node %s was replayed (its nonce was seen)", from)
	}
	return principal, nil
}

// nonceBytes is the length of a forwarded request's nonce.
const nonceBytes = 16

// firstSight records nonce until expires and reports whether it was new.
// A request whose nonce has expired is refused by its time anyway.
func (f *forwarder) firstSight(nonce string, expires, now time.Time) bool {
	f.seenMu.Lock()
	defer f.seenMu.Unlock()
	if _, ok := f.seen[nonce]; ok {
		return false
	}
	if f.seen == nil {
		f.seen = map[string]time.Time{}
	}
	// Expired nonces go once the map has grown: the sweep costs one pass
	// per doubling, not one per request.
	if len(f.seen) >= f.sweepAt {
		for n, exp := range f.seen {
			if now.After(exp) {
				delete(f.seen, n)
			}
		}
		f.sweepAt = max(2*len(f.seen), 1024)
	}
	f.seen[nonce] = expires
	return true
}

// proxy returns the reverse proxy to the node at addr.
func (f *forwarder) proxy(addr string) (*httputil.ReverseProxy, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if p, ok := f.proxies[addr]; ok {
		return p, nil
	}
	var tr *http.Transport
	var host string
	switch {
	case strings.HasPrefix(addr, "unix://"):
		sock := strings.TrimPrefix(addr, "unix://")
		tr = &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", sock)
		}}
		host = "agentbox"
	case strings.HasPrefix(addr, "tcp://"):
		tr = &http.Transport{DialContext: (&net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}).DialContext}
		host = strings.TrimPrefix(addr, "tcp://")
	default:
		return nil, fmt.Errorf("node address %q is neither unix:// nor tcp://: %w", addr, errdefs.ErrUnavailable)
	}
	// A few idle connections per peer serve the next requests; bursts
	// open more, which close once done.
	tr.MaxIdleConnsPerHost = ForwardIdleConns
	tr.IdleConnTimeout = 90 * time.Second
	p := &httputil.ReverseProxy{
		Transport: tr,
		// Streams go on as they come.
		FlushInterval: -1,
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.Out.URL.Scheme, pr.Out.URL.Host, pr.Out.Host = "http", host, host
		},
		// The reply's request ID is this node's already (the owner used
		// it too).
		ModifyResponse: func(resp *http.Response) error {
			resp.Header.Del("X-Request-Id")
			return nil
		},
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			if r.Context().Err() != nil {
				return // the caller went away
			}
			writeError(w, fmt.Errorf("forwarding %s %s to node at %s: %v: %w", r.Method, r.URL.Path, addr, err, errdefs.ErrUnavailable))
		},
	}
	if f.proxies == nil {
		f.proxies, f.transports = map[string]*httputil.ReverseProxy{}, map[string]http.RoundTripper{}
	}
	f.proxies[addr], f.transports[addr] = p, tr
	return p, nil
}

// signHeaders sets the headers of a request forwarded to node to.
func (f *forwarder) signHeaders(h http.Header, method, uri, to, principal string) {
	for _, k := range []string{"Authorization", hdrFrom, hdrTo, hdrTime, hdrNonce, hdrPrincipal, hdrSig} {
		h.Del(k)
	}
	at := strconv.FormatInt(time.Now().Unix(), 10)
	b := make([]byte, nonceBytes)
	rand.Read(b) // never fails (crypto/rand)
	nonce := hex.EncodeToString(b)
	h.Set(hdrFrom, f.self)
	h.Set(hdrTo, to)
	h.Set(hdrTime, at)
	h.Set(hdrNonce, nonce)
	h.Set(hdrPrincipal, principal)
	h.Set(hdrSig, f.sign(method, uri, at, nonce, f.self, to, principal))
}

// call makes a request of this node's own to node to, signed as for the
// principal of the request it serves, and fails unless it succeeds.
func (s *Server) call(ctx context.Context, to manager.Owner, method, uri string) error {
	if to.State != apitypes.NodeUp {
		return fmt.Errorf("node %s (%s) is %s: %w", to.Node, to.Addr, to.State, errdefs.ErrUnavailable)
	}
	if _, err := s.fwd.proxy(to.Addr); err != nil {
		return err
	}
	s.fwd.mu.Lock()
	tr := s.fwd.transports[to.Addr]
	s.fwd.mu.Unlock()
	req, err := http.NewRequestWithContext(ctx, method, "http://agentbox"+uri, nil)
	if err != nil {
		return err
	}
	if strings.HasPrefix(to.Addr, "tcp://") {
		req.URL.Host = strings.TrimPrefix(to.Addr, "tcp://")
		req.Host = req.URL.Host
	}
	s.fwd.signHeaders(req.Header, method, uri, to.Node, s.principal())
	resp, err := tr.RoundTrip(req)
	if err != nil {
		return fmt.Errorf("%s %s on node %s: %w", method, uri, to.Node, errors.Join(err, errdefs.ErrUnavailable))
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 == 2 {
		return nil
	}
	var body ErrorBody
	json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(&body)
	err = fmt.Errorf("%s %s on node %s: %s: %s", method, uri, to.Node, resp.Status, body.Error.Message)
	if resp.StatusCode == http.StatusNotFound {
		err = errors.Join(err, errdefs.ErrNotFound)
	}
	return err
}

// principal is who this node lets in: the token's holder, or anyone on
// the unix socket when no token is set.
func (s *Server) principal() string {
	if s.token != "" {
		return principalToken
	}
	return principalLocal
}

// forward sends r to the node that owns its object and copies the reply.
func (s *Server) forward(w http.ResponseWriter, r *http.Request, to manager.Owner) {
	if to.State != apitypes.NodeUp {
		writeError(w, fmt.Errorf("%s is served by node %s (%s), which is %s: its files are not reachable from this node; they come back with it: %w",
			r.URL.Path, to.Node, to.Addr, to.State, errdefs.ErrUnavailable))
		return
	}
	p, err := s.fwd.proxy(to.Addr)
	if err != nil {
		writeError(w, err)
		return
	}
	out := r.Clone(r.Context())
	// The caller's credentials stay here: the owner trusts this node's
	// signature for the principal it authenticated.
	s.fwd.signHeaders(out.Header, r.Method, r.URL.RequestURI(), to.Node, s.principal())
	out.Header.Set("X-Request-Id", w.Header().Get("X-Request-Id"))
	// A command's input and output stream at once (exec with NDJSON
	// stdin): this side must read the body while it writes the reply.
	http.NewResponseController(w).EnableFullDuplex()
	p.ServeHTTP(w, out)
}

// routed wraps the handler of a route: requests about an object another
// node owns go to that node; the rest are served here.
func (s *Server) routed(method, pattern string, h func(*Server, http.ResponseWriter, *http.Request)) http.HandlerFunc {
	owner := s.ownerFunc(method, pattern)
	return func(w http.ResponseWriter, r *http.Request) {
		r = withPathIDs(r)
		if owner == nil || s.fwd == nil {
			h(s, w, r)
			return
		}
		to, err := owner(r)
		switch {
		case err != nil && !errors.Is(err, errdefs.ErrNotFound):
			writeError(w, err)
			return
		case err != nil || to.Self:
			// Not found is the handler's to say, as it says it.
			if forwarded(r) {
				w.Header().Set(hdrServedBy, s.fwd.self)
			}
			h(s, w, r)
			return
		case forwarded(r):
			writeError(w, fmt.Errorf("%s is now served by node %s, not by this one (the request was forwarded here): try again: %w",
				r.URL.Path, to.Node, errdefs.ErrUnavailable))
			return
		}
		s.forward(w, r, to)
	}
}

// ownerFunc returns how to find the node that serves a route's requests,
// or nil for the routes every node serves from the store (lists, reads
// of records, repos, events, secrets).
func (s *Server) ownerFunc(method, pattern string) func(*http.Request) (manager.Owner, error) {
	m := s.m
	switch {
	case method == "GET" && (pattern == "/v1/workspaces/{id}" || pattern == "/v1/sandboxes/{id}" || pattern == "/v1/candidates/{id}" ||
		pattern == "/v1/workspaces/{id}/candidates" || pattern == "/v1/sandboxes/{id}/usage"):
		return nil
	case method == "POST" && (pattern == "/v1/workspaces" || pattern == "/v1/solve"):
		// New work (a workspace, a solve run, which makes its own) goes
		// to the least loaded live node.
		return func(r *http.Request) (manager.Owner, error) {
			if forwarded(r) {
				return manager.Owner{Node: m.NodeID(), Self: true}, nil // placed already
			}
			return m.Place(r.Context())
		}
	case method == "POST" && pattern == "/v1/sandboxes":
		return func(r *http.Request) (manager.Owner, error) {
			// The workspace is in the body, which is read (a small JSON
			// document) and put back for whoever serves it.
			b, err := io.ReadAll(io.LimitReader(r.Body, 1<<20+1))
			r.Body.Close()
			r.Body = io.NopCloser(bytes.NewReader(b))
			if err != nil {
				return manager.Owner{}, err
			}
			var req struct {
				Workspace string `json:"workspace"`
			}
			if json.Unmarshal(b, &req) != nil || req.Workspace == "" {
				return manager.Owner{Self: true}, nil // the handler refuses it
			}
			return m.WorkspaceOwner(r.Context(), req.Workspace)
		}
	case strings.HasPrefix(pattern, "/v1/workspaces/{id}"):
		return func(r *http.Request) (manager.Owner, error) { return m.WorkspaceOwner(r.Context(), r.PathValue("id")) }
	case strings.HasPrefix(pattern, "/v1/sandboxes/{id}"):
		return func(r *http.Request) (manager.Owner, error) { return m.SandboxOwner(r.Context(), r.PathValue("id")) }
	case method == "POST" && strings.HasPrefix(pattern, "/v1/candidates/{id}"):
		return func(r *http.Request) (manager.Owner, error) { return m.CandidateOwner(r.Context(), r.PathValue("id")) }
	case method == "GET" && pattern == "/v1/execs/{id}/output":
		return func(r *http.Request) (manager.Owner, error) { return m.ExecOwner(r.Context(), r.PathValue("id")) }
	case method == "POST" && pattern == "/v1/solve/{id}/cancel":
		return func(r *http.Request) (manager.Owner, error) { return m.SolveRunOwner(r.Context(), r.PathValue("id")) }
	}
	return nil
}

// removeElsewhere removes the workspaces of repo that other nodes own,
// through them.
func (s *Server) removeElsewhere(ctx context.Context, repo string) error {
	wss, err := s.m.ListWorkspaces(ctx, manager.ListFilter{Repo: repo})
	if err != nil {
		return err
	}
	for _, w := range wss {
		to, err := s.m.WorkspaceOwner(ctx, w.ID)
		switch {
		case errors.Is(err, errdefs.ErrNotFound) || err == nil && to.Self:
			continue
		case err != nil:
			return err
		}
		if err := s.call(ctx, to, "DELETE", "/v1/workspaces/"+w.ID); err != nil && !errors.Is(err, errdefs.ErrNotFound) {
			return err
		}
	}
	return nil
}
