// Package dashboard serves agentbox's web dashboard at / on the daemon's
// listeners: a few embedded static files (plain HTML, CSS and JavaScript,
// no build step) and a thin gate in front of the /v1 API that the pages
// call.
//
// The pages never hold the daemon's token. On TCP they log in with it
// once; the daemon answers with a random session ID in an HttpOnly,
// SameSite=Strict cookie and keeps the session in memory. The pages then
// call /ui/api/v1/..., which this package checks (session, CSRF, the
// routes a dashboard may use) and hands to the API handler with the token
// added, so that the dashboard is exactly as strong as the API and no
// stronger: it reads what the CLI reads and decides candidates, nothing
// else. On the unix socket, where /v1 asks for no token, no login is asked
// either.
package dashboard

import (
	"bytes"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"embed"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"regexp"
	"strings"
	"sync"
	"time"
)

//go:embed static
var static embed.FS

const (
	// SessionCookie holds the session ID: random, never the token.
	SessionCookie = "agentbox_session"
	// CSRFHeader carries the session's CSRF token on every state-changing
	// call; the token is an HMAC of the session ID under a key that
	// lives only in this process.
	CSRFHeader = "X-Agentbox-Csrf"
	// apiPrefix is where the pages reach the API.
	apiPrefix = "/ui/api"
	// defaultTTL is how long a session lasts from its login.
	defaultTTL = 12 * time.Hour
	// maxSessions bounds the session table: a login past it ends the
	// session closest to its end.
	maxSessions = 256
)

// CSP is the Content-Security-Policy of every dashboard page: scripts
// and styles only from the daemon's own files (none inline), no other
// origin, no framing, and Trusted Types that make any assignment of a
// string to innerHTML (or another HTML sink) throw, so agent-controlled
// text can only ever reach the page as text.
const CSP = "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; " +
	"font-src 'self'; object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'; " +
	"require-trusted-types-for 'script'; trusted-types 'none'"

// apiCSP is sent with every API reply passed through: should a browser be
// led to render one (a raw file of a workspace), it runs nothing.
const apiCSP = "default-src 'none'; sandbox; frame-ancestors 'none'"

// Options configures a Handler.
type Options struct {
	// Token is the API's bearer token; empty (the unix socket) means no
	// login, as /v1 asks none.
	Token string
	// API serves /v1, /metrics and /mcp; every request that is not the
	// dashboard's goes to it unchanged.
	API    http.Handler
	Logger *slog.Logger
	// SessionTTL is how long a login lasts; default 12h.
	SessionTTL time.Duration
	// PublicOrigin, when set, is the origin browsers reach the dashboard
	// at through a reverse proxy ("https://agentbox.example.com", as
	// config.CanonicalOrigin writes it): state-changing requests must
	// come from it, and over https the session cookie is Secure. Empty:
	// the request's own origin.
	PublicOrigin string
}

// Handler serves the dashboard and passes everything else to the API.
type Handler struct {
	token   string
	api     http.Handler
	log     *slog.Logger
	ttl     time.Duration
	mux     *http.ServeMux
	csrfKey []byte
	cop     *http.CrossOriginProtection
	origin  string // PublicOrigin

	mu       sync.Mutex
	sessions map[string]time.Time // SHA-256 of the session ID -> its end
	now      func() time.Time
}

// New returns the dashboard in front of opts.API. A PublicOrigin that is
// not an origin is an error.
func New(opts Options) (*Handler, error) {
	h := &Handler{token: opts.Token, api: opts.API, log: opts.Logger, ttl: opts.SessionTTL,
		mux: http.NewServeMux(), csrfKey: make([]byte, 32), cop: http.NewCrossOriginProtection(),
		origin: opts.PublicOrigin, sessions: map[string]time.Time{}, now: time.Now}
	if h.origin != "" {
		// Behind a proxy the Host the daemon sees may not be the one the
		// browser used: the cross-origin check that falls back on Host
		// (no Sec-Fetch-Site) trusts the public origin instead.
		if err := h.cop.AddTrustedOrigin(h.origin); err != nil {
			return nil, fmt.Errorf("dashboard public origin %q: %w", h.origin, err)
		}
	}
	if h.log == nil {
		h.log = slog.New(slog.DiscardHandler)
	}
	if h.ttl <= 0 {
		h.ttl = defaultTTL
	}
	rand.Read(h.csrfKey)
	assets, _ := fs.Sub(static, "static")
	files := http.FileServerFS(assets)
	h.mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) {
		pageHeaders(w)
		http.ServeFileFS(w, r, assets, "index.html")
	})
	h.mux.Handle("GET /ui/static/", http.StripPrefix("/ui/static", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		pageHeaders(w)
		if r.URL.Path == "/" || strings.HasSuffix(r.URL.Path, "/") {
			http.NotFound(w, r) // no directory listings
			return
		}
		files.ServeHTTP(w, r)
	})))
	h.mux.HandleFunc("GET /ui/session", h.session)
	h.mux.HandleFunc("POST /ui/login", h.login)
	h.mux.HandleFunc("POST /ui/logout", h.logout)
	h.mux.HandleFunc(apiPrefix+"/", h.proxy)
	h.mux.HandleFunc("/ui/", func(w http.ResponseWriter, r *http.Request) {
		pageHeaders(w)
		http.NotFound(w, r)
	})
	return h, nil
}

// ServeHTTP serves / and /ui/..., and hands every other path to the API.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path == "/" || strings.HasPrefix(r.URL.Path, "/ui/") {
		if h.token == "" && !loopbackHost(r.Host) {
			// Without a login the only guard is who can reach the
			// listener: a page of another site whose name was rebound
			// to a local forward of the socket must not read through it.
			pageHeaders(w)
			writeErr(w, http.StatusForbidden, "forbidden", "without a token the dashboard answers only on a loopback host name (localhost, 127.0.0.1, [::1])")
			return
		}
		h.mux.ServeHTTP(w, r)
		return
	}
	h.api.ServeHTTP(w, r)
}

// loopbackHost reports whether a Host header names this machine's
// loopback: localhost, a name under .localhost, or a loopback address.
func loopbackHost(host string) bool {
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	host = strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")
	if strings.EqualFold(host, "localhost") || strings.HasSuffix(strings.ToLower(host), ".localhost") {
		return true
	}
	ip, err := netip.ParseAddr(host)
	return err == nil && ip.IsLoopback()
}

// pageHeaders are the headers of everything the dashboard itself serves.
func pageHeaders(w http.ResponseWriter) {
	hd := w.Header()
	hd.Set("Content-Security-Policy", CSP)
	hd.Set("X-Frame-Options", "DENY")
	hd.Set("X-Content-Type-Options", "nosniff")
	hd.Set("Referrer-Policy", "no-referrer")
	hd.Set("Cross-Origin-Opener-Policy", "same-origin")
	hd.Set("Cross-Origin-Resource-Policy", "same-origin")
	hd.Set("Cache-Control", "no-store")
}

// sessionInfo is what GET /ui/session and POST /ui/login answer.
type sessionInfo struct {
	// LoginRequired is whether this listener asks for the token.
	LoginRequired bool `json:"login_required"`
	// Authenticated is whether the request may use the API.
	Authenticated bool `json:"authenticated"`
	// CSRF is the token every state-changing call must carry in the
	// X-Agentbox-Csrf header; empty unless authenticated.
	CSRF string `json:"csrf,omitempty"`
}

func (h *Handler) session(w http.ResponseWriter, r *http.Request) {
	pageHeaders(w)
	id, ok := h.authenticated(r)
	info := sessionInfo{LoginRequired: h.token != "", Authenticated: ok}
	if ok {
		info.CSRF = h.csrfToken(id)
	}
	writeJSON(w, http.StatusOK, info)
}

// loginRequest is the body of POST /ui/login.
type loginRequest struct {
	Token string `json:"token"`
}

func (h *Handler) login(w http.ResponseWriter, r *http.Request) {
	pageHeaders(w)
	if err := h.sameOrigin(r); err != nil {
		writeErr(w, http.StatusForbidden, "forbidden", err.Error())
		return
	}
	if h.token == "" {
		writeJSON(w, http.StatusOK, sessionInfo{Authenticated: true, CSRF: h.csrfToken("")})
		return
	}
	var req loginRequest
	if err := json.NewDecoder(io.LimitReader(r.Body, 4096)).Decode(&req); err != nil {
		writeErr(w, http.StatusBadRequest, "invalid", "the login body must be a JSON object with a token")
		return
	}
	if subtle.ConstantTimeCompare([]byte(req.Token), []byte(h.token)) != 1 {
		// A slow wrong answer makes guessing slower; the token is long.
		select {
		case <-time.After(300 * time.Millisecond):
		case <-r.Context().Done():
		}
		h.log.WarnContext(r.Context(), "dashboard login refused", "remote", r.RemoteAddr)
		writeErr(w, http.StatusUnauthorized, "unauthorized", "wrong token")
		return
	}
	id := h.newSession()
	http.SetCookie(w, &http.Cookie{Name: SessionCookie, Value: id, Path: "/", HttpOnly: true,
		SameSite: http.SameSiteStrictMode, Secure: h.secure(r), MaxAge: int(h.ttl / time.Second)})
	h.log.InfoContext(r.Context(), "dashboard login", "remote", r.RemoteAddr)
	writeJSON(w, http.StatusOK, sessionInfo{LoginRequired: true, Authenticated: true, CSRF: h.csrfToken(id)})
}

func (h *Handler) logout(w http.ResponseWriter, r *http.Request) {
	pageHeaders(w)
	if err := h.checkCSRF(r); err != nil {
		writeErr(w, http.StatusForbidden, "forbidden", err.Error())
		return
	}
	if c, err := r.Cookie(SessionCookie); err == nil {
		h.mu.Lock()
		delete(h.sessions, hashID(c.Value))
		h.mu.Unlock()
	}
	http.SetCookie(w, &http.Cookie{Name: SessionCookie, Value: "", Path: "/", HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: h.secure(r), MaxAge: -1})
	writeJSON(w, http.StatusOK, sessionInfo{LoginRequired: h.token != ""})
}

// newSession records a new session and returns its ID.
func (h *Handler) newSession() string {
	b := make([]byte, 32)
	rand.Read(b)
	id := base64.RawURLEncoding.EncodeToString(b)
	now := h.now()
	h.mu.Lock()
	defer h.mu.Unlock()
	for k, end := range h.sessions {
		if !now.Before(end) {
			delete(h.sessions, k)
		}
	}
	for len(h.sessions) >= maxSessions {
		var oldest string
		var oldestEnd time.Time
		for k, end := range h.sessions {
			if oldest == "" || end.Before(oldestEnd) {
				oldest, oldestEnd = k, end
			}
		}
		delete(h.sessions, oldest)
	}
	h.sessions[hashID(id)] = now.Add(h.ttl)
	return id
}

// hashID is the key a session is kept under, so that the table holds no
// usable cookie.
func hashID(id string) string {
	s := sha256.Sum256([]byte(id))
	return string(s[:])
}

// authenticated reports whether r may use the API, and its session ID
// ("" on a listener without a token).
func (h *Handler) authenticated(r *http.Request) (string, bool) {
	if h.token == "" {
		return "", true
	}
	c, err := r.Cookie(SessionCookie)
	if err != nil || c.Value == "" {
		return "", false
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	end, ok := h.sessions[hashID(c.Value)]
	if !ok {
		return "", false
	}
	if !h.now().Before(end) {
		delete(h.sessions, hashID(c.Value))
		return "", false
	}
	return c.Value, true
}

// csrfToken is the CSRF token of a session: an HMAC of its ID, so that
// it need not be stored and means nothing without the session.
func (h *Handler) csrfToken(sessionID string) string {
	m := hmac.New(sha256.New, h.csrfKey)
	m.Write([]byte("csrf\x00" + sessionID))
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

// sameOrigin refuses a request a browser sent from another site: by Go's
// cross-origin protection (Sec-Fetch-Site, else Origin against Host), and
// by requiring an Origin that names this host, which every browser sends
// on a POST.
func (h *Handler) sameOrigin(r *http.Request) error {
	if err := h.cop.Check(r); err != nil {
		return errors.New("cross-origin request refused")
	}
	origin := r.Header.Get("Origin")
	if origin == "" {
		return errors.New("a state-changing request must carry an Origin header")
	}
	if h.origin != "" {
		if origin != h.origin {
			return errors.New("cross-origin request refused: Origin is not the dashboard's public origin")
		}
		return nil
	}
	scheme := "http://"
	if r.TLS != nil {
		scheme = "https://"
	}
	if origin != scheme+r.Host {
		return errors.New("cross-origin request refused: Origin is not this host")
	}
	return nil
}

// secure is whether the session cookie must be Secure: the browser
// reaches the dashboard over https, to the daemon itself or to the proxy
// in front of it.
func (h *Handler) secure(r *http.Request) bool {
	return r.TLS != nil || strings.HasPrefix(h.origin, "https://")
}

// checkCSRF is the check of every state-changing call: same origin and
// the session's CSRF token.
func (h *Handler) checkCSRF(r *http.Request) error {
	if err := h.sameOrigin(r); err != nil {
		return err
	}
	id, ok := h.authenticated(r)
	if !ok {
		return errors.New("not logged in")
	}
	got := r.Header.Get(CSRFHeader)
	if got == "" || !hmac.Equal([]byte(got), []byte(h.csrfToken(id))) {
		return errors.New("missing or wrong CSRF token")
	}
	return nil
}

// readRoutes are the API paths the pages read (GET). Streams that would
// hand the browser a sandbox's own HTTP server or terminal are not among
// them: /v1/sandboxes/{id}/ports/... and .../shell.
var readRoutes = regexp.MustCompile(`^/v1/((health|repos|workspaces|sandboxes|events|usage|forges|candidates)(/[^/]+(/(status|diff|candidates|files|files/list|files/stat|processes|processes/[^/]+|processes/[^/]+/logs|execs|ports|usage))?)?|execs/[^/]+/output)$`)

// writeRoutes are the state-changing calls the pages make: deciding a
// candidate, running the diff check, and the dry run of the collector
// that reports the disk budget.
var writeRoutes = regexp.MustCompile(`^/v1/(candidates/[^/]+/(approve|reject)|workspaces/[^/]+/diff/check|gc)$`)

// proxy hands an API call of the pages to the API, with the token.
func (h *Handler) proxy(w http.ResponseWriter, r *http.Request) {
	hd := w.Header()
	hd.Set("Content-Security-Policy", apiCSP)
	hd.Set("X-Content-Type-Options", "nosniff")
	hd.Set("X-Frame-Options", "DENY")
	hd.Set("Cache-Control", "no-store")
	if _, ok := h.authenticated(r); !ok {
		writeErr(w, http.StatusUnauthorized, "unauthorized", "log in first")
		return
	}
	path := strings.TrimPrefix(r.URL.Path, apiPrefix)
	switch {
	case r.Method == http.MethodGet && (readRoutes.MatchString(path) || path == "/metrics"):
	case r.Method == http.MethodPost && writeRoutes.MatchString(path):
		if err := h.checkCSRF(r); err != nil {
			writeErr(w, http.StatusForbidden, "forbidden", err.Error())
			return
		}
		if path == "/v1/gc" {
			// Only the dry run: the dashboard reports the budget, the
			// operator collects.
			body, err := io.ReadAll(io.LimitReader(r.Body, 4096))
			var req struct {
				DryRun bool `json:"dry_run"`
			}
			if err != nil || json.Unmarshal(body, &req) != nil || !req.DryRun {
				writeErr(w, http.StatusForbidden, "forbidden", "the dashboard runs the collector only as a dry run")
				return
			}
			r.Body = io.NopCloser(bytes.NewReader(body))
			r.ContentLength = int64(len(body))
		}
	default:
		writeErr(w, http.StatusForbidden, "forbidden", "the dashboard does not serve "+r.Method+" "+path)
		return
	}
	r2 := r.Clone(r.Context())
	r2.URL.Path = path
	r2.URL.RawPath = ""
	r2.RequestURI = ""
	r2.Header.Del("Cookie")
	r2.Header.Del(CSRFHeader)
	r2.Header.Del("Authorization")
	if h.token != "" {
		r2.Header.Set("Authorization", "Bearer "+h.token)
	}
	h.api.ServeHTTP(w, r2)
}

// errorReply has the shape of the API's error bodies.
type errorReply struct {
	Error struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
}

func writeErr(w http.ResponseWriter, status int, code, msg string) {
	var e errorReply
	e.Error.Code, e.Error.Message = code, msg
	writeJSON(w, status, e)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(v)
}
