package e2b

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/agentbox/agentbox/internal/e2b/processpb"
	"github.com/agentbox/agentbox/internal/errdefs"
)

const testToken = "e2b-unit-token-0123456789abcdef"

// newTestServer is a Server without a manager: enough for everything that
// is refused before the manager is asked.
func newTestServer(t *testing.T) *Server {
	t.Helper()
	s, err := New(nil, Options{Token: testToken, DataDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s
}

func TestControlErrors(t *testing.T) {
	s := newTestServer(t)
	for _, tc := range []struct {
		name, method, path, key, body string
		status                        int
		msg                           string
	}{
		{"no key", "GET", "/v2/sandboxes", "", "", 401, "API key"},
		{"wrong key", "GET", "/v2/sandboxes", "wrong", "", 401, "API key"},
		{"list", "GET", "/v2/sandboxes", testToken, "", 200, ""},
		{"bad state", "GET", "/v2/sandboxes?state=dead", testToken, "", 400, "not running or paused"},
		{"bad limit", "GET", "/v2/sandboxes?limit=0", testToken, "", 400, "limit"},
		{"get unknown", "GET", "/sandboxes/ws_000000000000", testToken, "", 404, "not found"},
		{"get not an id", "GET", "/sandboxes/..%2fetc", testToken, "", 404, "not found"},
		{"kill unknown", "DELETE", "/sandboxes/ws_000000000000", testToken, "", 404, "not found"},
		{"timeout unknown", "POST", "/sandboxes/ws_000000000000/timeout", testToken, `{"timeout": 10}`, 404, "not found"},
		{"timeout missing", "POST", "/sandboxes/ws_000000000000/timeout", testToken, `{}`, 400, "required"},
		{"timeout too long", "POST", "/sandboxes/ws_000000000000/timeout", testToken, `{"timeout": 90000}`, 400, "outside"},
		{"pause unknown", "POST", "/sandboxes/ws_000000000000/pause", testToken, `{}`, 404, "not found"},
		{"connect unknown", "POST", "/v2/sandboxes/ws_000000000000/connect", testToken, `{"timeout": 10}`, 404, "not found"},
		{"unknown template", "POST", "/v2/sandboxes", testToken, `{"templateID": "nope"}`, 404, `template "nope" not found`},
		{"network rules", "POST", "/v2/sandboxes", testToken, `{"network": {"allowOut": ["example.com"]}}`, 501, "network rules"},
		{"mcp", "POST", "/v2/sandboxes", testToken, `{"mcp": {"x": {}}}`, 501, "MCP"},
		{"volumes", "POST", "/v2/sandboxes", testToken, `{"volumeMounts": [{"name": "v", "path": "/v"}]}`, 501, "volume"},
		{"not json", "POST", "/v2/sandboxes", testToken, `{`, 400, "request body"},
		{"bad env", "POST", "/v2/sandboxes", testToken, `{"envVars": {"A B": "x"}}`, 400, "envVars"},
		{"snapshots", "POST", "/sandboxes/ws_000000000000/snapshots", testToken, `{}`, 501, "snapshots"},
		{"templates", "GET", "/templates", testToken, "", 501, "templates"},
		{"unknown route", "GET", "/nope", testToken, "", 404, "no E2B API route"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req := httptest.NewRequest(tc.method, tc.path, strings.NewReader(tc.body))
			if tc.key != "" {
				req.Header.Set("X-API-Key", tc.key)
			}
			rec := httptest.NewRecorder()
			s.ServeHTTP(rec, req)
			if rec.Code != tc.status {
				t.Fatalf("status %d, want %d: %s", rec.Code, tc.status, rec.Body)
			}
			if tc.status == 200 {
				if got := strings.TrimSpace(rec.Body.String()); got != "[]" {
					t.Errorf("body %s, want []", got)
				}
				return
			}
			var body apiError
			if err := json.Unmarshal(rec.Body.Bytes(), &body); err != nil || body.Code != tc.status || !strings.Contains(body.Message, tc.msg) {
				t.Errorf("body %s (%v): want code %d and a message with %q", rec.Body, err, tc.status, tc.msg)
			}
		})
	}
	if n := len(s.reg.list()); n != 0 {
		t.Errorf("%d sandboxes recorded after refused requests", n)
	}
}

// TestEnvdErrors checks the Connect errors the SDK maps to its classes.
func TestEnvdErrors(t *testing.T) {
	s := newTestServer(t)
	now := time.Now().UTC()
	for _, rec := range []record{
		{ID: "ws_running00000", EnvdToken: "tok", User: "user", Home: "/home/user", State: stateRunning, StartedAt: now, EndAt: now.Add(time.Hour)},
		{ID: "ws_paused000000", EnvdToken: "tok", User: "user", Home: "/home/user", State: statePaused, StartedAt: now, EndAt: now.Add(time.Hour)},
	} {
		if err := s.reg.put(rec); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		name, id, token, auth string
		code                  connect.Code
	}{
		{"unknown sandbox", "ws_000000000000", "tok", "", connect.CodeNotFound},
		{"no token", "ws_running00000", "", "", connect.CodeUnauthenticated},
		{"wrong token", "ws_running00000", "nope", "", connect.CodeUnauthenticated},
		{"paused", "ws_paused000000", "tok", "", connect.CodeUnavailable},
		{"root", "ws_running00000", "tok", "root", connect.CodePermissionDenied},
		{"other user", "ws_running00000", "tok", "bob", connect.CodePermissionDenied},
	} {
		t.Run(tc.name, func(t *testing.T) {
			body := `{"process": {"cmd": "/bin/true"}}`
			// A stream's error is its end-of-stream message: the envelope
			// flag 2, then {"error": {"code": ...}}.
			var env []byte
			env = append(env, 0, 0, 0, 0, byte(len(body)))
			env = append(env, body...)
			req := httptest.NewRequest("POST", "/process.Process/Start", strings.NewReader(string(env)))
			req.Header.Set("Content-Type", "application/connect+json")
			req.Header.Set(headerSandboxID, tc.id)
			if tc.token != "" {
				req.Header.Set(headerAccessToken, tc.token)
			}
			if tc.auth != "" {
				req.Header.Set("Authorization", "Basic "+base64.StdEncoding.EncodeToString([]byte(tc.auth+":")))
			}
			rec := httptest.NewRecorder()
			s.ServeHTTP(rec, req)
			b := rec.Body.Bytes()
			if len(b) < 5 || b[0] != 2 {
				t.Fatalf("status %d, body %q: want an end-of-stream message", rec.Code, b)
			}
			var end struct {
				Error struct{ Code, Message string }
			}
			if err := json.Unmarshal(b[5:], &end); err != nil {
				t.Fatal(err)
			}
			if end.Error.Code != tc.code.String() {
				t.Errorf("code %q (%s), want %q", end.Error.Code, end.Error.Message, tc.code)
			}
		})
	}
	t.Run("health", func(t *testing.T) {
		for id, want := range map[string]int{"ws_running00000": 204, "ws_paused000000": 502, "ws_000000000000": 502} {
			req := httptest.NewRequest("GET", "/health", nil)
			req.Header.Set(headerSandboxID, id)
			req.Header.Set(headerAccessToken, "tok")
			rec := httptest.NewRecorder()
			s.ServeHTTP(rec, req)
			if rec.Code != want {
				t.Errorf("health of %s: %d, want %d", id, rec.Code, want)
			}
		}
	})
}

func TestRegistryReload(t *testing.T) {
	dir := t.TempDir()
	expired := make(chan string, 4)
	r, err := newRegistry(dir)
	if err != nil {
		t.Fatal(err)
	}
	r.start(func(id string) { expired <- id })
	now := time.Now().UTC().Truncate(time.Second)
	want := record{ID: "ws_aaaaaaaaaaaa", TemplateID: "base", Metadata: map[string]string{"k": "v"}, EnvdToken: "t",
		SpecJSON: json.RawMessage(`{"backend":"docker"}`), User: "user", Home: "/home/user", State: stateRunning, StartedAt: now, EndAt: now.Add(time.Hour)}
	if err := r.put(want); err != nil {
		t.Fatal(err)
	}
	ended := want
	ended.ID, ended.EndAt = "ws_bbbbbbbbbbbb", now.Add(-time.Second)
	r.close()
	if err := r.save(&ended); err != nil {
		t.Fatal(err)
	}
	r2, err := newRegistry(dir)
	if err != nil {
		t.Fatal(err)
	}
	r2.start(func(id string) { expired <- id })
	defer r2.close()
	got, err := r2.get(want.ID)
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("reloaded record (-want +got):\n%s", d)
	}
	select {
	case id := <-expired:
		if id != ended.ID {
			t.Errorf("expired %s, want %s", id, ended.ID)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a sandbox past its end was not expired after a reload")
	}
	if err := r2.remove(want.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := r2.get(want.ID); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("get after remove: %v", err)
	}
}

func TestHelpers(t *testing.T) {
	tgt := target{Home: "/home/user"}
	for in, want := range map[string]string{"": "/home/user", "sub": "/home/user/sub", "/tmp": "/tmp", "a/../../x": "/home/x"} {
		if got := tgt.workdir(in); got != want {
			t.Errorf("workdir(%q) = %q, want %q", in, got, want)
		}
	}
	// What the SDK sends for {"agentbox.repo": "/tmp/a b/c&d=e", k: "v%41"},
	// its query parameter decoded.
	md, err := metadataFilter("agentbox.repo=%252Ftmp%252Fa%2520b%252Fc%2526d%253De&k=v%252541")
	if err != nil || !cmp.Equal(md, map[string]string{"agentbox.repo": "/tmp/a b/c&d=e", "k": "v%41"}) {
		t.Errorf("metadataFilter: %v %v", md, err)
	}
	rec := record{User: "user", TemplateID: "base"}
	for user, code := range map[string]string{"": "", "user": "", "root": "policy_denied", "bob": "policy_denied"} {
		if got := errdefs.Code(checkUser(rec, user)); got != code {
			t.Errorf("checkUser(%q): %q, want %q", user, got, code)
		}
	}
	if u := basicUser("Basic " + base64.StdEncoding.EncodeToString([]byte("root:"))); u != "root" {
		t.Errorf("basicUser: %q", u)
	}
	for _, tc := range []struct {
		code, sig    int
		state        string
		exited       bool
		status, errs string
	}{
		{0, 0, "exited", true, "exit status 0", ""},
		{3, 0, "exited", true, "exit status 3", "exit status 3"},
		{-1, 9, "killed", false, "signal: killed", "signal: killed"},
		{-1, 0, "timed_out", false, "timed_out", "the command's timeout ran out; its process tree was killed"},
	} {
		e := endEvent(tc.code, tc.sig, tc.state, "").GetEnd()
		if e.GetExitCode() != int32(tc.code) || e.GetExited() != tc.exited || e.GetStatus() != tc.status || e.GetError() != tc.errs {
			t.Errorf("endEvent(%d, %d, %s) = %v", tc.code, tc.sig, tc.state, e)
		}
	}
	for err, code := range map[error]connect.Code{
		errdefs.NotFound("sandbox", "x"):              connect.CodeNotFound,
		errdefs.Invalid("bad"):                        connect.CodeInvalidArgument,
		fmt.Errorf("x: %w", errdefs.ErrUnauthorized):  connect.CodeUnauthenticated,
		fmt.Errorf("x: %w", errNotImplemented):        connect.CodeUnimplemented,
		fmt.Errorf("x: %w", context.DeadlineExceeded): connect.CodeDeadlineExceeded,
	} {
		if got := connect.CodeOf(connectError(err)); got != code {
			t.Errorf("connectError(%v) = %v, want %v", err, got, code)
		}
	}
	_ = processpb.Signal_SIGNAL_SIGKILL
}

// TestPolicyFor checks an E2B sandbox's policy: no network unless asked
// and allowed by the daemon's list, never an open one; envVars and HOME.
func TestPolicyFor(t *testing.T) {
	tpl := Template{Home: "/home/user"}
	closed := &Server{opts: Options{}}
	open := &Server{opts: Options{InternetAllow: []string{"pypi.org", "files.pythonhosted.org:443"}}}
	for _, tc := range []struct {
		name     string
		s        *Server
		internet bool
		mode     string
		allow    []string
	}{
		{"default", open, false, "none", nil},
		{"asked, no list", closed, true, "none", nil},
		{"asked, list", open, true, "allowlist", []string{"pypi.org", "files.pythonhosted.org:443"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := tc.s.policyFor(map[string]string{"A": "1"}, tpl, tc.internet)
			if err != nil {
				t.Fatal(err)
			}
			if p.Network.Mode != tc.mode || !cmp.Equal(p.Network.Allow, tc.allow, cmpopts.EquateEmpty()) {
				t.Errorf("network %+v, want %s %v", p.Network, tc.mode, tc.allow)
			}
			if !cmp.Equal(p.Env, map[string]string{"A": "1", "HOME": "/home/user"}) {
				t.Errorf("env %v", p.Env)
			}
		})
	}
	if _, err := open.policyFor(map[string]string{"A B": "1"}, tpl, false); !errors.Is(err, errdefs.ErrInvalid) {
		t.Errorf("a bad variable name: %v, want invalid", err)
	}
}
