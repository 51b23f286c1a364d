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
	h := New(Options{API: api})
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
	h := New(Options{Token: "0123456789abcdef0123", API: http.NotFoundHandler()})
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
	h := New(Options{API: api})
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
	h = New(Options{Token: "0123456789abcdef0123", API: api})
	req := httptest.NewRequest("GET", "http://dash.example/ui/session", nil)
	w := httptest.NewRecorder()
	h.ServeHTTP(w, req)
	if w.Code != 200 {
		t.Errorf("with a token, GET /ui/session on dash.example: %d", w.Code)
	}
}
