package dashboard_test

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"strings"
	"testing"

	"github.com/agentbox/agentbox/client"
	"github.com/agentbox/agentbox/internal/dashboard"
)

// TestDashboardSecurity asks a real daemon over plain HTTP what a browser
// on another site, or a client without the token, could get from it.
func TestDashboardSecurity(t *testing.T) {
	d := startDaemon(t)
	ws := seedHostile(t, d)
	ctx := t.Context()
	ex, err := d.CL.ExecBuffered(ctx, ws.ID, client.Exec{Argv: []string{"echo", "exec-output-marker"}}, nil)
	if err != nil {
		t.Fatalf("exec: %v", err)
	}
	cand, err := d.CL.Review(ctx, ws.ID, client.ReviewRequest{Test: "true"})
	if err != nil {
		t.Fatalf("review: %v", err)
	}
	if cand.Disposition != "ready" {
		t.Fatalf("candidate %s is %s, want ready (findings %v)", cand.ID, cand.Disposition, cand.Findings)
	}

	do := func(t *testing.T, c *http.Client, method, path string, hdr map[string]string, body string) (*http.Response, string) {
		t.Helper()
		req, err := http.NewRequestWithContext(ctx, method, d.URL+path, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		for k, v := range hdr {
			req.Header.Set(k, v)
		}
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp, string(b)
	}
	// leaks reports which of the workspace's data a body holds.
	leaks := func(body string) []string {
		var out []string
		for _, s := range []string{ws.ID, ws.RepoID, cand.ID, "dashboard-diff-marker", "file-body-marker", "exec-output-marker", d.Token} {
			if strings.Contains(body, s) {
				out = append(out, s)
			}
		}
		return out
	}
	plain := &http.Client{}

	t.Run("page headers", func(t *testing.T) {
		for _, path := range []string{"/", "/ui/static/app.js", "/ui/static/app.css", "/ui/session"} {
			resp, _ := do(t, plain, "GET", path, nil, "")
			if resp.StatusCode != 200 {
				t.Errorf("GET %s: %d", path, resp.StatusCode)
			}
			csp := resp.Header.Get("Content-Security-Policy")
			for _, want := range []string{"default-src 'self'", "script-src 'self'", "frame-ancestors 'none'", "object-src 'none'", "require-trusted-types-for 'script'"} {
				if !strings.Contains(csp, want) {
					t.Errorf("GET %s: CSP %q lacks %q", path, csp, want)
				}
			}
			if strings.Contains(csp, "unsafe-inline") || strings.Contains(csp, "unsafe-eval") || strings.Contains(csp, "http") {
				t.Errorf("GET %s: CSP %q allows inline code or another origin", path, csp)
			}
			if resp.Header.Get("X-Frame-Options") != "DENY" || resp.Header.Get("X-Content-Type-Options") != "nosniff" {
				t.Errorf("GET %s: X-Frame-Options %q, X-Content-Type-Options %q", path, resp.Header.Get("X-Frame-Options"), resp.Header.Get("X-Content-Type-Options"))
			}
		}
		// The page itself has no inline script or style, and names no
		// other origin.
		_, page := do(t, plain, "GET", "/", nil, "")
		if strings.Contains(page, "<script>") || strings.Contains(page, "style=") || strings.Contains(page, "<style") || strings.Contains(page, "://") {
			t.Errorf("index.html has inline code or another origin:\n%s", page)
		}
		if resp, _ := do(t, plain, "GET", "/ui/static/", nil, ""); resp.StatusCode != 404 {
			t.Errorf("GET /ui/static/ (a listing): %d, want 404", resp.StatusCode)
		}
	})

	t.Run("no token no data", func(t *testing.T) {
		for _, path := range []string{"/v1/workspaces", "/v1/events", "/v1/usage", "/ui/api/v1/workspaces", "/ui/api/v1/events?follow=true",
			"/ui/api/v1/workspaces/" + ws.ID + "/diff", "/ui/api/v1/workspaces/" + ws.ID + "/files?path=main.go", "/ui/api/metrics", "/ui/api/v1/candidates/" + cand.ID,
			"/v1/execs/" + ex.ExecID + "/output", "/ui/api/v1/execs/" + ex.ExecID + "/output", "/ui/api/v1/execs/" + ex.ExecID + "/output?follow=true",
			"/ui/api/v1/workspaces/" + ws.ID + "/execs?follow=true", "/ui/api/v1/usage?by=workspace", "/ui/api/v1/events?order=newest&object=" + ws.ID} {
			resp, body := do(t, plain, "GET", path, nil, "")
			if resp.StatusCode != http.StatusUnauthorized {
				t.Errorf("GET %s without a login: %d, want 401", path, resp.StatusCode)
			}
			if l := leaks(body); len(l) > 0 {
				t.Errorf("GET %s without a login leaks %v: %s", path, l, body)
			}
		}
		// A forged session cookie is no session.
		resp, body := do(t, plain, "GET", "/ui/api/v1/workspaces", map[string]string{"Cookie": dashboard.SessionCookie + "=" + d.Token}, "")
		if resp.StatusCode != http.StatusUnauthorized || len(leaks(body)) > 0 {
			t.Errorf("the token as a session cookie: %d %s", resp.StatusCode, body)
		}
		resp, _ = do(t, plain, "POST", "/ui/login", map[string]string{"Origin": d.URL, "Content-Type": "application/json"}, `{"token":"wrong-token-wrong-token"}`)
		if resp.StatusCode != http.StatusUnauthorized || len(resp.Cookies()) != 0 {
			t.Errorf("a wrong token: %d, cookies %v", resp.StatusCode, resp.Cookies())
		}
	})

	// login logs a jar in and returns the session's CSRF token.
	login := func(t *testing.T) (*http.Client, string) {
		t.Helper()
		jar, _ := cookiejar.New(nil)
		c := &http.Client{Jar: jar}
		resp, body := do(t, c, "POST", "/ui/login", map[string]string{"Origin": d.URL, "Content-Type": "application/json", "Sec-Fetch-Site": "same-origin"},
			`{"token":"`+d.Token+`"}`)
		if resp.StatusCode != 200 {
			t.Fatalf("login: %d %s", resp.StatusCode, body)
		}
		var cookie *http.Cookie
		for _, ck := range resp.Cookies() {
			if ck.Name == dashboard.SessionCookie {
				cookie = ck
			}
		}
		if cookie == nil || !cookie.HttpOnly || cookie.SameSite != http.SameSiteStrictMode || cookie.Path != "/" {
			t.Fatalf("session cookie %+v: want HttpOnly, SameSite=Strict, Path=/", cookie)
		}
		if strings.Contains(cookie.Value, d.Token) || len(cookie.Value) < 32 {
			t.Fatalf("session cookie %q holds the token or is short", cookie.Value)
		}
		var info struct{ CSRF string }
		json.Unmarshal([]byte(body), &info)
		if info.CSRF == "" || strings.Contains(body, d.Token) {
			t.Fatalf("login reply %s: no CSRF token, or the token", body)
		}
		return c, info.CSRF
	}

	t.Run("login reads", func(t *testing.T) {
		c, _ := login(t)
		resp, body := do(t, c, "GET", "/ui/api/v1/workspaces", nil, "")
		if resp.StatusCode != 200 || !strings.Contains(body, ws.ID) {
			t.Fatalf("GET workspaces after login: %d %s", resp.StatusCode, body)
		}
		if csp := resp.Header.Get("Content-Security-Policy"); !strings.Contains(csp, "sandbox") {
			t.Errorf("an API reply through the dashboard has CSP %q, want a sandbox", csp)
		}
		// An ordinary exec's output, from the daemon's ring.
		resp, body = do(t, c, "GET", "/ui/api/v1/execs/"+ex.ExecID+"/output", nil, "")
		if resp.StatusCode != 200 || !strings.Contains(body, "exec-output-marker") {
			t.Errorf("GET an exec's output after login: %d %s", resp.StatusCode, body)
		}
		if resp, body := do(t, c, "GET", "/ui/api/v1/execs/ex_nosuchexec/output", nil, ""); resp.StatusCode != 404 {
			t.Errorf("GET an unknown exec's output: %d %s", resp.StatusCode, body)
		}
		// A workspace file, raw, cannot run as a page of the dashboard's origin.
		resp, _ = do(t, c, "GET", "/ui/api/v1/workspaces/"+ws.ID+"/files?path=main.go", map[string]string{"Accept": "*/*"}, "")
		if resp.StatusCode != 200 || !strings.Contains(resp.Header.Get("Content-Security-Policy"), "sandbox") || resp.Header.Get("X-Content-Type-Options") != "nosniff" {
			t.Errorf("a raw file: %d, headers %v", resp.StatusCode, resp.Header)
		}
	})

	t.Run("cross-site posts refused", func(t *testing.T) {
		c, csrf := login(t)
		approve := "/ui/api/v1/candidates/" + cand.ID + "/approve"
		body := `{"reason":"forged"}`
		for name, hdr := range map[string]map[string]string{
			"other origin":          {"Origin": "http://evil.example", "Content-Type": "application/json", dashboard.CSRFHeader: csrf},
			"cross-site fetch":      {"Origin": d.URL, "Sec-Fetch-Site": "cross-site", "Content-Type": "application/json", dashboard.CSRFHeader: csrf},
			"same-site fetch":       {"Origin": d.URL, "Sec-Fetch-Site": "same-site", "Content-Type": "application/json", dashboard.CSRFHeader: csrf},
			"no origin":             {"Content-Type": "application/json", dashboard.CSRFHeader: csrf},
			"no csrf token":         {"Origin": d.URL, "Sec-Fetch-Site": "same-origin", "Content-Type": "application/json"},
			"wrong csrf token":      {"Origin": d.URL, "Sec-Fetch-Site": "same-origin", "Content-Type": "application/json", dashboard.CSRFHeader: csrf + "x"},
			"form post other site":  {"Origin": "null", "Content-Type": "application/x-www-form-urlencoded"},
			"csrf of another login": {"Origin": d.URL, "Content-Type": "application/json", dashboard.CSRFHeader: func() string { _, other := login(t); return other }()},
		} {
			resp, out := do(t, c, "POST", approve, hdr, body)
			if resp.StatusCode != http.StatusForbidden {
				t.Errorf("%s: POST approve: %d %s, want 403", name, resp.StatusCode, out)
			}
		}
		// Straight to /v1 with the cookie: the API wants its bearer token.
		resp, _ := do(t, c, "POST", "/v1/candidates/"+cand.ID+"/approve", map[string]string{"Origin": d.URL, "Content-Type": "application/json"}, body)
		if resp.StatusCode != http.StatusUnauthorized {
			t.Errorf("POST /v1 approve with the session cookie: %d, want 401", resp.StatusCode)
		}
		// A login from another site is refused too.
		resp, _ = do(t, plain, "POST", "/ui/login", map[string]string{"Origin": "http://evil.example", "Content-Type": "application/json"}, `{"token":"`+d.Token+`"}`)
		if resp.StatusCode != http.StatusForbidden || len(resp.Cookies()) != 0 {
			t.Errorf("a cross-site login: %d, cookies %v", resp.StatusCode, resp.Cookies())
		}
		got, err := d.CL.GetCandidate(ctx, cand.ID)
		if err != nil || got.Disposition != "ready" {
			t.Fatalf("after the forged posts the candidate is %s (%v), want ready", got.Disposition, err)
		}
	})

	t.Run("only the dashboard's routes", func(t *testing.T) {
		c, csrf := login(t)
		ok := map[string]string{"Origin": d.URL, "Sec-Fetch-Site": "same-origin", "Content-Type": "application/json", dashboard.CSRFHeader: csrf}
		for _, r := range []struct{ method, path, body string }{
			{"POST", "/ui/api/v1/workspaces", `{"empty":true}`},
			{"DELETE", "/ui/api/v1/workspaces/" + ws.ID, ""},
			{"POST", "/ui/api/v1/workspaces/" + ws.ID + "/exec", `{"argv":["true"]}`},
			{"PUT", "/ui/api/v1/secrets/x", `{"value":"y"}`},
			{"POST", "/ui/api/v1/gc", `{}`},
			{"GET", "/ui/api/v1/sandboxes/sb_x/ports/80/", ""},
			{"GET", "/ui/api/v1/workspaces/" + ws.ID + "/shell", ""},
			{"GET", "/ui/api/v1/workspaces/" + ws.ID + "/bundle", ""},
			{"POST", "/ui/api/mcp", `{}`},
			{"POST", "/ui/api/v1/solve", `{}`},
			{"GET", "/ui/api/v1/solve", ""},
			{"POST", "/ui/api/v1/workspaces/" + ws.ID + "/execs", `{}`},
			{"POST", "/ui/api/v1/workspaces/" + ws.ID + "/processes", `{"argv":["true"]}`},
		} {
			resp, out := do(t, c, r.method, r.path, ok, r.body)
			if resp.StatusCode != http.StatusForbidden {
				t.Errorf("%s %s: %d %s, want 403", r.method, r.path, resp.StatusCode, out)
			}
		}
		if wss, _ := d.CL.ListWorkspaces(ctx, "", ""); len(wss) != 1 {
			t.Errorf("%d workspaces after the refused calls, want 1", len(wss))
		}
		// The dry run of the collector is allowed: it reports the budget.
		resp, out := do(t, c, "POST", "/ui/api/v1/gc", ok, `{"dry_run":true}`)
		if resp.StatusCode != 200 || !strings.Contains(out, `"dry_run":true`) {
			t.Errorf("gc dry run: %d %s", resp.StatusCode, out)
		}
		// And a reject with the right headers works, which shows the
		// refusals above were for their reasons.
		resp, out = do(t, c, "POST", "/ui/api/v1/workspaces/"+ws.ID+"/diff/check", ok, `{}`)
		if resp.StatusCode != 200 {
			t.Errorf("diff check: %d %s", resp.StatusCode, out)
		}
	})

	t.Run("logout ends the session", func(t *testing.T) {
		c, csrf := login(t)
		u, _ := url.Parse(d.URL)
		cookies := c.Jar.Cookies(u)
		resp, _ := do(t, c, "POST", "/ui/logout", map[string]string{"Origin": d.URL, dashboard.CSRFHeader: csrf}, "")
		if resp.StatusCode != 200 {
			t.Fatalf("logout: %d", resp.StatusCode)
		}
		// The old cookie, sent again, is no session any more.
		if len(cookies) != 1 {
			t.Fatalf("cookies before logout: %v", cookies)
		}
		if resp, body := do(t, plain, "GET", "/ui/api/v1/workspaces", map[string]string{"Cookie": cookies[0].String()}, ""); resp.StatusCode != 401 || len(leaks(body)) > 0 {
			t.Errorf("after logout: %d %s", resp.StatusCode, body)
		}
	})
}
