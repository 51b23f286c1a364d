package forge

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"unicode/utf8"

	"github.com/agentbox/agentbox/internal/errdefs"
	"github.com/google/go-cmp/cmp"
)

const testToken = "ghp_TESTtoken0123456789abcdefABCDEF"

// fakeGitHub serves the part of the GitHub REST API the forge uses, in the
// documented shapes (docs.github.com/rest/pulls/pulls, /rest/issues/labels,
// /rest/repos/repos), for one repository octo/hello. It fails the test on
// any request the documentation does not describe.
type fakeGitHub struct {
	t  *testing.T
	mu sync.Mutex
	// pulls by number; labels by pull number.
	pulls  map[int]map[string]any
	labels map[int][]string
	next   int
	// log is "METHOD path" per request, in order.
	log []string
	// raceOnCreate: the next create fails as if another opener won.
	raceOnCreate bool
	// labelsForbidden: adding labels is refused (a token without the
	// issues permission).
	labelsForbidden bool
}

func newFakeGitHub(t *testing.T) (*fakeGitHub, *httptest.Server) {
	f := &fakeGitHub{t: t, pulls: map[int]map[string]any{}, labels: map[int][]string{}, next: 1}
	srv := httptest.NewServer(f)
	t.Cleanup(srv.Close)
	return f, srv
}

func (f *fakeGitHub) reply(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(v)
}

func (f *fakeGitHub) pullJSON(n int) map[string]any {
	p := f.pulls[n]
	return map[string]any{
		"url":      "https://api.github.com/repos/octo/hello/pulls/" + strconv.Itoa(n),
		"id":       1000 + n,
		"number":   n,
		"state":    p["state"],
		"title":    p["title"],
		"body":     p["body"],
		"html_url": "https://github.com/octo/hello/pull/" + strconv.Itoa(n),
		"head":     map[string]any{"ref": p["head"], "label": "octo:" + p["head"].(string), "repo": map[string]any{"full_name": "octo/hello"}},
		"base":     map[string]any{"ref": p["base"], "label": "octo:" + p["base"].(string)},
	}
}

func (f *fakeGitHub) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.log = append(f.log, r.Method+" "+r.URL.Path)
	if got := r.Header.Get("Authorization"); got != "Bearer "+testToken {
		// GitHub's documented 401 body. It echoes nothing, but a server
		// that did must not get the token into our error: echo it here.
		f.reply(w, 401, map[string]any{"message": "Bad credentials (" + got + ")", "documentation_url": "https://docs.github.com/rest", "status": "401"})
		return
	}
	if r.Header.Get("Accept") != "application/vnd.github+json" || r.Header.Get("X-GitHub-Api-Version") != "2022-11-28" {
		f.t.Errorf("%s %s: Accept %q, X-GitHub-Api-Version %q", r.Method, r.URL.Path, r.Header.Get("Accept"), r.Header.Get("X-GitHub-Api-Version"))
	}
	var body map[string]any
	if r.Method == http.MethodPost || r.Method == http.MethodPatch {
		if ct := r.Header.Get("Content-Type"); ct != "application/json" {
			f.t.Errorf("%s %s: Content-Type %q", r.Method, r.URL.Path, ct)
		}
		if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
			f.reply(w, 400, map[string]any{"message": "Problems parsing JSON"})
			return
		}
	}
	const repo = "/repos/octo/hello"
	if !strings.HasPrefix(r.URL.Path, repo) {
		f.reply(w, 404, map[string]any{"message": "Not Found", "documentation_url": "https://docs.github.com/rest"})
		return
	}
	rest := strings.TrimPrefix(r.URL.Path, repo)
	switch {
	case r.Method == http.MethodGet && rest == "":
		f.reply(w, 200, map[string]any{"id": 1, "full_name": "octo/hello", "default_branch": "trunk"})
	case r.Method == http.MethodGet && rest == "/pulls":
		q := r.URL.Query()
		if q.Get("state") != "open" || !strings.HasPrefix(q.Get("head"), "octo:") {
			f.t.Errorf("list pulls: query %v: want state=open and head=octo:BRANCH", q)
		}
		list := []map[string]any{}
		for n := 1; n < f.next; n++ {
			p := f.pulls[n]
			if p["state"] == "open" && "octo:"+p["head"].(string) == q.Get("head") {
				list = append(list, f.pullJSON(n))
			}
		}
		f.reply(w, 200, list)
	case r.Method == http.MethodPost && rest == "/pulls":
		for _, k := range []string{"title", "head", "base"} {
			if s, _ := body[k].(string); s == "" {
				f.reply(w, 422, map[string]any{"message": "Validation Failed", "errors": []any{map[string]any{"resource": "PullRequest", "field": k, "code": "missing_field"}}})
				return
			}
		}
		if b, _ := body["body"].(string); utf8.RuneCountInString(b) > 65536 {
			f.reply(w, 422, map[string]any{"message": "Validation Failed", "errors": []any{map[string]any{"resource": "Issue", "code": "custom", "field": "body", "message": "body is too long (maximum is 65536 characters)"}}})
			return
		}
		for n := 1; n < f.next; n++ {
			p := f.pulls[n]
			if p["state"] == "open" && p["head"] == body["head"] && p["base"] == body["base"] {
				f.reply(w, 422, map[string]any{"message": "Validation Failed", "errors": []any{map[string]any{"resource": "PullRequest", "code": "custom", "message": "A pull request already exists for octo:" + p["head"].(string) + "."}}})
				return
			}
		}
		n := f.next
		f.next++
		f.pulls[n] = map[string]any{"title": body["title"], "body": body["body"], "head": body["head"], "base": body["base"], "state": "open"}
		if f.raceOnCreate {
			// Another opener made it first: this one is refused.
			f.raceOnCreate = false
			f.reply(w, 422, map[string]any{"message": "Validation Failed", "errors": []any{map[string]any{"resource": "PullRequest", "code": "custom", "message": "A pull request already exists"}}})
			return
		}
		f.reply(w, 201, f.pullJSON(n))
	case r.Method == http.MethodPatch && strings.HasPrefix(rest, "/pulls/"):
		n, _ := strconv.Atoi(strings.TrimPrefix(rest, "/pulls/"))
		p, ok := f.pulls[n]
		if !ok {
			f.reply(w, 404, map[string]any{"message": "Not Found"})
			return
		}
		for _, k := range []string{"title", "body", "base", "state"} {
			if v, ok := body[k]; ok {
				p[k] = v
			}
		}
		f.reply(w, 200, f.pullJSON(n))
	case r.Method == http.MethodPost && strings.HasPrefix(rest, "/issues/") && strings.HasSuffix(rest, "/labels"):
		n, _ := strconv.Atoi(strings.TrimSuffix(strings.TrimPrefix(rest, "/issues/"), "/labels"))
		if f.labelsForbidden {
			f.reply(w, 403, map[string]any{"message": "Resource not accessible by personal access token"})
			return
		}
		if _, ok := f.pulls[n]; !ok {
			f.reply(w, 404, map[string]any{"message": "Not Found"})
			return
		}
		ls, ok := body["labels"].([]any)
		if !ok {
			f.reply(w, 422, map[string]any{"message": "Validation Failed"})
			return
		}
		out := []map[string]any{}
		for _, l := range ls {
			f.labels[n] = append(f.labels[n], l.(string))
		}
		for i, l := range f.labels[n] {
			out = append(out, map[string]any{"id": i + 1, "name": l, "color": "ededed"})
		}
		f.reply(w, 200, out)
	default:
		f.t.Errorf("undocumented request %s %s", r.Method, r.URL)
		f.reply(w, 404, map[string]any{"message": "Not Found"})
	}
}

func TestGitHub(t *testing.T) {
	fake, srv := newFakeGitHub(t)
	f, err := New(Config{Kind: KindGitHub, APIURL: srv.URL, Token: testToken})
	if err != nil {
		t.Fatal(err)
	}
	if f.Kind() != "github" {
		t.Errorf("Kind = %q", f.Kind())
	}
	r := Remote{Host: "github.com", Owner: "octo", Repo: "hello"}
	ctx := t.Context()

	if b, err := f.DefaultBranch(ctx, r); err != nil || b != "trunk" {
		t.Fatalf("DefaultBranch = %q, %v; want trunk", b, err)
	}

	req := PRRequest{Head: "agentbox/fix/ws1", Base: "trunk", Title: "Fix it", Body: "tests pass", Labels: []string{"agentbox", "agentbox"}}
	pr, err := f.OpenOrUpdatePR(ctx, r, req)
	if err != nil {
		t.Fatal(err)
	}
	want := PR{Number: 1, URL: "https://github.com/octo/hello/pull/1", State: "open"}
	if d := cmp.Diff(want, pr); d != "" {
		t.Errorf("first OpenOrUpdatePR (-want +got):\n%s", d)
	}

	req.Title, req.Body, req.Labels = "Fix it, take 2", "tests pass again", []string{"ready"}
	pr, err = f.OpenOrUpdatePR(ctx, r, req)
	if err != nil {
		t.Fatal(err)
	}
	want.Updated = true
	if d := cmp.Diff(want, pr); d != "" {
		t.Errorf("second OpenOrUpdatePR (-want +got):\n%s", d)
	}
	fake.mu.Lock()
	if p := fake.pulls[1]; p["title"] != "Fix it, take 2" || p["body"] != "tests pass again" || p["base"] != "trunk" {
		t.Errorf("pull 1 after update: %v", p)
	}
	if d := cmp.Diff([]string{"agentbox", "ready"}, fake.labels[1]); d != "" {
		t.Errorf("labels (-want +got):\n%s", d)
	}
	wantLog := []string{
		"GET /repos/octo/hello",
		"GET /repos/octo/hello/pulls", "POST /repos/octo/hello/pulls", "POST /repos/octo/hello/issues/1/labels",
		"GET /repos/octo/hello/pulls", "PATCH /repos/octo/hello/pulls/1", "POST /repos/octo/hello/issues/1/labels",
	}
	if d := cmp.Diff(wantLog, fake.log); d != "" {
		t.Errorf("requests (-want +got):\n%s", d)
	}
	fake.log = nil
	fake.mu.Unlock()

	// No labels: no label call (an empty list would clear the PR's labels).
	req.Labels = nil
	if _, err := f.OpenOrUpdatePR(ctx, r, req); err != nil {
		t.Fatal(err)
	}
	fake.mu.Lock()
	if d := cmp.Diff([]string{"GET /repos/octo/hello/pulls", "PATCH /repos/octo/hello/pulls/1"}, fake.log); d != "" {
		t.Errorf("requests without labels (-want +got):\n%s", d)
	}
	fake.raceOnCreate = true
	fake.mu.Unlock()

	// A create that loses a race updates the winner.
	pr, err = f.OpenOrUpdatePR(ctx, r, PRRequest{Head: "other", Base: "trunk", Title: "Other"})
	if err != nil {
		t.Fatal(err)
	}
	if pr.Number != 2 || !pr.Updated {
		t.Errorf("raced create = %+v; want number 2, updated", pr)
	}

	// A label the token may not set is a note; the PR is there.
	fake.mu.Lock()
	fake.labelsForbidden = true
	fake.mu.Unlock()
	pr, err = f.OpenOrUpdatePR(ctx, r, PRRequest{Head: "third", Base: "trunk", Title: "Third", Labels: []string{"nope"}})
	if err != nil {
		t.Fatal(err)
	}
	if pr.Number != 3 || len(pr.Notes) != 1 || !strings.Contains(pr.Notes[0], `"nope"`) || !strings.Contains(pr.Notes[0], "403") {
		t.Errorf("PR with a forbidden label = %+v; want number 3 and a note naming the label and 403", pr)
	}

	// A body GitHub would refuse is cut, with a note.
	fake.mu.Lock()
	fake.labelsForbidden = false
	fake.mu.Unlock()
	pr, err = f.OpenOrUpdatePR(ctx, r, PRRequest{Head: "long", Base: "trunk", Title: "Long", Body: strings.Repeat("x", 100000)})
	if err != nil {
		t.Fatal(err)
	}
	if len(pr.Notes) != 1 || !strings.Contains(pr.Notes[0], "cut") {
		t.Errorf("PR with a long body = %+v; want a note that it was cut", pr)
	}

	// Unknown repository.
	_, err = f.DefaultBranch(ctx, Remote{Host: "github.com", Owner: "octo", Repo: "nope"})
	if !errors.Is(err, errdefs.ErrNotFound) || !strings.Contains(err.Error(), "github octo/nope") || !strings.Contains(err.Error(), "404") {
		t.Errorf("unknown repo: %v; want not found naming github octo/nope 404", err)
	}
	_, err = f.OpenOrUpdatePR(ctx, Remote{Host: "github.com", Owner: "octo", Repo: "nope"}, req)
	if !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("PR on unknown repo: %v; want not found", err)
	}
}

func TestGitHubBadTokenNotInError(t *testing.T) {
	_, srv := newFakeGitHub(t)
	const bad = "ghp_WRONGtoken_must_not_leak_0123456789"
	f, err := New(Config{Kind: KindGitHub, APIURL: srv.URL, Token: bad})
	if err != nil {
		t.Fatal(err)
	}
	r := Remote{Host: "github.com", Owner: "octo", Repo: "hello"}
	_, err = f.OpenOrUpdatePR(t.Context(), r, PRRequest{Head: "x", Base: "trunk", Title: "t"})
	checkAuthError(t, err, "github", "octo/hello", bad)
	_, err = f.DefaultBranch(t.Context(), r)
	checkAuthError(t, err, "github", "octo/hello", bad)
}

// checkAuthError asserts that err is a 401 naming the forge and repository,
// classed unauthorized, and that neither it nor its message holds token.
func checkAuthError(t *testing.T, err error, kind, repo, token string) {
	t.Helper()
	if err == nil {
		t.Fatal("a bad token was accepted")
	}
	msg := err.Error()
	for _, s := range []string{kind, repo, "401"} {
		if !strings.Contains(msg, s) {
			t.Errorf("error %q does not name %q", msg, s)
		}
	}
	if strings.Contains(msg, token) || strings.Contains(fmt.Sprintf("%#v", err), token) {
		t.Errorf("error holds the token: %q", msg)
	}
	if !errors.Is(err, errdefs.ErrUnauthorized) {
		t.Errorf("error %q is not classed unauthorized", msg)
	}
	var ae *APIError
	if !errors.As(err, &ae) || ae.Status != 401 {
		t.Errorf("error %q is not an *APIError with status 401", msg)
	}
}

// TestGitHubDefaultAPIURL: without APIURL, a GitHub Enterprise host is
// reached at https://HOST/api/v3 (github.com at api.github.com).
func TestGitHubDefaultAPIURL(t *testing.T) {
	var got string
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got = r.URL.Path
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, `{"default_branch":"main"}`)
	}))
	defer srv.Close()
	f, err := New(Config{Kind: KindGitHub, Token: testToken, HTTPClient: srv.Client()})
	if err != nil {
		t.Fatal(err)
	}
	host := strings.TrimPrefix(srv.URL, "https://")
	if b, err := f.DefaultBranch(t.Context(), Remote{Host: host, Owner: "o", Repo: "r"}); err != nil || b != "main" {
		t.Fatalf("DefaultBranch = %q, %v", b, err)
	}
	if got != "/api/v3/repos/o/r" {
		t.Errorf("path %q, want /api/v3/repos/o/r", got)
	}
	if b := (&github{&client{}}).base(Remote{Host: "github.com"}); b != "https://api.github.com" {
		t.Errorf("github.com API base %q", b)
	}
}

// TestReplyBounded: a reply larger than the bound is refused, not read whole.
func TestReplyBounded(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, `{"default_branch":"`)
		chunk := strings.Repeat("a", 1<<16)
		for i := 0; i < (maxBody>>16)+2; i++ {
			if _, err := fmt.Fprint(w, chunk); err != nil {
				return
			}
		}
		fmt.Fprint(w, `"}`)
	}))
	defer srv.Close()
	f, _ := New(Config{Kind: KindGitHub, APIURL: srv.URL, Token: testToken})
	_, err := f.DefaultBranch(t.Context(), Remote{Host: "github.com", Owner: "o", Repo: "r"})
	if !errors.Is(err, errdefs.ErrTooLarge) {
		t.Errorf("huge reply: %v; want ErrTooLarge", err)
	}
}

// TestNoRedirect: the default client does not follow a redirect, which
// would carry the token (and a POST) to wherever the server points.
func TestNoRedirect(t *testing.T) {
	var leaked bool
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { leaked = true }))
	defer other.Close()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, other.URL+r.URL.Path, http.StatusTemporaryRedirect)
	}))
	defer srv.Close()
	for _, hc := range []*http.Client{nil, http.DefaultClient} {
		f, _ := New(Config{Kind: KindGitea, APIURL: srv.URL, Token: testToken, HTTPClient: hc})
		_, err := f.DefaultBranch(t.Context(), Remote{Host: "x", Owner: "o", Repo: "r"})
		if err == nil || !strings.Contains(err.Error(), "307") {
			t.Errorf("redirect: %v; want an error naming 307", err)
		}
	}
	if leaked {
		t.Error("the redirect was followed")
	}
}
