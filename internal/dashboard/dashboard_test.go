package dashboard

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// recorder is an API that records what reached it.
type recorder struct{ auth, path []string }

func (r *recorder) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	r.auth = append(r.auth, req.Header.Get("Authorization"))
	r.path = append(r.path, req.URL.Path)
	w.WriteHeader(200)
}

// TestUnixSocketNoLogin: where /v1 asks no token (the unix socket), the
// dashboard asks no login either, but still refuses cross-site writes
// and calls without the CSRF token.
func TestUnixSocketNoLogin(t *testing.T) {
	api := &recorder{}
	h := mustNew(t, Options{API: api})
	get := func(path string) *httptest.ResponseRecorder {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest("GET", "http://localhost"+path, nil))
		return w
	}
	if w := get("/ui/session"); !strings.Contains(w.Body.String(), `"authenticated":true`) {
		t.Fatalf("session on the socket: %s", w.Body)
	}
	if w := get("/ui/api/v1/workspaces"); w.Code != 200 || len(api.auth) != 1 || api.auth[0] != "" || api.path[0] != "/v1/workspaces" {
		t.Fatalf("a read: %d, reached the API as %v %v", w.Code, api.path, api.auth)
	}
	// Paths that are not the dashboard's go to the API as they came.
	if get("/v1/health"); api.path[len(api.path)-1] != "/v1/health" {
		t.Fatalf("/v1/health reached the API as %v", api.path)
	}
	post := func(hdr map[string]string) int {
		req := httptest.NewRequest("POST", "http://localhost/ui/api/v1/candidates/c1/approve", strings.NewReader(`{"reason":"x"}`))
		for k, v := range hdr {
			req.Header.Set(k, v)
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req)
		return w.Code
	}
	csrf := h.csrfToken("")
	for name, c := range map[string]struct {
		hdr  map[string]string
		want int
	}{
		"cross-site": {map[string]string{"Origin": "http://evil.example", CSRFHeader: csrf}, 403},
		"no token":   {map[string]string{"Origin": "http://localhost"}, 403},
		"same site":  {map[string]string{"Origin": "http://localhost", CSRFHeader: csrf}, 200},
	} {
		if got := post(c.hdr); got != c.want {
			t.Errorf("%s: %d, want %d", name, got, c.want)
		}
	}
}

// TestSessionsBounded: logins past maxSessions end the oldest sessions,
// so that the table cannot grow without bound.
func TestSessionsBounded(t *testing.T) {
	h := mustNew(t, Options{Token: "0123456789abcdef0123", API: http.NotFoundHandler()})
	first := h.newSession()
	for range maxSessions + 10 {
		h.newSession()
	}
	if n := len(h.sessions); n != maxSessions {
		t.Fatalf("%d sessions kept, want %d", n, maxSessions)
	}
	req := httptest.NewRequest("GET", "/ui/session", nil)
	req.AddCookie(&http.Cookie{Name: SessionCookie, Value: first})
	if _, ok := h.authenticated(req); ok {
		t.Fatal("the oldest session outlived the bound")
	}
}

// TestUnixSocketRebinding: without a token the dashboard answers only
// under a loopback host name, so that a site whose name was rebound to a
// local forward of the socket reads nothing; /v1 is the API's business.
func TestUnixSocketRebinding(t *testing.T) {
	api := &recorder{}
	h := mustNew(t, Options{API: api})
	for host, want := range map[string]int{"localhost:7000": 200, "127.0.0.1:7000": 200, "[::1]:7000": 200, "app.localhost": 200,
		"evil.example:7000": 403, "evil.example": 403, "10.0.0.1:7000": 403, "127.0.0.1.evil.example": 403} {
		for _, path := range []string{"/", "/ui/session", "/ui/api/v1/workspaces"} {
			req := httptest.NewRequest("GET", "http://x"+path, nil)
			req.Host = host
			w := httptest.NewRecorder()
			h.ServeHTTP(w, req)
			if w.Code != want {
				t.Errorf("GET %s with Host %s: %d, want %d", path, host, w.Code, want)
			}
		}
	}
	// With a token the login is the guard: any host name is served.
	h = mustNew(t, Options{Token: "0123456789abcdef0123", API: api})
	req := httptest.NewRequest("GET", "http://dash.example/ui/session", nil)
	w := httptest.NewRecorder()
	h.ServeHTTP(w, req)
	if w.Code != 200 {
		t.Errorf("with a token, GET /ui/session on dash.example: %d", w.Code)
	}
}

func mustNew(t *testing.T, opts Options) *Handler {
	t.Helper()
	h, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// TestPublicOrigin: behind an HTTPS reverse proxy (plain HTTP from the
// proxy to the daemon, Host rewritten), the session cookie is Secure and
// a state-changing request must come from the public origin, not the
// origin the daemon sees; without the setting, the request's own origin.
func TestPublicOrigin(t *testing.T) {
	const token = "0123456789abcdef0123"
	const public = "https://agentbox.example.com"
	api := &recorder{}
	h := mustNew(t, Options{Token: token, API: api, PublicOrigin: public})
	send := func(method, path, origin, body string, hdr map[string]string, cookie string) *httptest.ResponseRecorder {
		req := httptest.NewRequest(method, "http://127.0.0.1:7000"+path, strings.NewReader(body))
		if origin != "" {
			req.Header.Set("Origin", origin)
		}
		for k, v := range hdr {
			req.Header.Set(k, v)
		}
		if cookie != "" {
			req.AddCookie(&http.Cookie{Name: SessionCookie, Value: cookie})
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req)
		return w
	}
	login := `{"token":"` + token + `"}`
	// The origin the daemon sees (the proxy's view) is not the public one.
	for _, origin := range []string{"http://127.0.0.1:7000", "http://agentbox.example.com", "https://agentbox.example.com:8443", "https://evil.example", ""} {
		if w := send("POST", "/ui/login", origin, login, nil, ""); w.Code != 403 {
			t.Errorf("login from origin %q: %d, want 403", origin, w.Code)
		}
	}
	w := send("POST", "/ui/login", public, login, map[string]string{"Sec-Fetch-Site": "same-origin"}, "")
	if w.Code != 200 {
		t.Fatalf("login from the public origin: %d %s", w.Code, w.Body)
	}
	var session *http.Cookie
	for _, c := range w.Result().Cookies() {
		if c.Name == SessionCookie {
			session = c
		}
	}
	if session == nil || !session.Secure || !session.HttpOnly || session.SameSite != http.SameSiteStrictMode {
		t.Fatalf("session cookie over the https proxy: %+v, want Secure, HttpOnly, SameSite=Strict", session)
	}
	// Without Sec-Fetch-Site (an older browser) Go's check compares Origin
	// with Host, which the proxy rewrote: the public origin is trusted.
	if w := send("POST", "/ui/login", public, login, nil, ""); w.Code != 200 {
		t.Errorf("login from the public origin without Sec-Fetch-Site: %d", w.Code)
	}
	csrf := h.csrfToken(session.Value)
	approve := func(origin string) int {
		return send("POST", "/ui/api/v1/candidates/c1/approve", origin, `{"reason":"x"}`, map[string]string{CSRFHeader: csrf}, session.Value).Code
	}
	if got := approve(public); got != 200 {
		t.Errorf("approve from the public origin: %d", got)
	}
	for _, origin := range []string{"http://127.0.0.1:7000", "https://evil.example", "null"} {
		if got := approve(origin); got != 403 {
			t.Errorf("approve from %q: %d, want 403", origin, got)
		}
	}
	if w := send("POST", "/ui/logout", public, "", map[string]string{CSRFHeader: csrf}, session.Value); w.Code != 200 || !strings.Contains(w.Header().Get("Set-Cookie"), "Secure") {
		t.Errorf("logout: %d, cookie %q", w.Code, w.Header().Get("Set-Cookie"))
	}

	// Without the setting, plain HTTP: not Secure, and the request's own
	// origin is the one expected.
	h = mustNew(t, Options{Token: token, API: api})
	w = send("POST", "/ui/login", "http://127.0.0.1:7000", login, nil, "")
	if w.Code != 200 || strings.Contains(w.Header().Get("Set-Cookie"), "Secure") {
		t.Errorf("login on plain HTTP: %d, cookie %q", w.Code, w.Header().Get("Set-Cookie"))
	}
	if w := send("POST", "/ui/login", public, login, nil, ""); w.Code != 403 {
		t.Errorf("login from an origin that is not this host without the setting: %d, want 403", w.Code)
	}
	if _, err := New(Options{Token: token, API: api, PublicOrigin: "https://x.example/path"}); err == nil {
		t.Error("a public origin with a path was taken")
	}
}
