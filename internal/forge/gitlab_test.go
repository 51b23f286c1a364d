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

	"github.com/agentbox/agentbox/internal/errdefs"
	"github.com/google/go-cmp/cmp"
)

const glToken = "glpat-TESTtoken0123456789abcd"

// fakeGitLab serves the part of the GitLab REST API v4 the forge uses, in
// the documented shapes (docs.gitlab.com/api/projects, /api/merge_requests),
// for one project "grp/sub/hello" (id 7) whose path is addressed URL-encoded.
// It takes a token the documented ways: PRIVATE-TOKEN or Authorization:
// Bearer.
type fakeGitLab struct {
	t      *testing.T
	mu     sync.Mutex
	mrs    map[int]map[string]any // by iid
	labels map[int][]string
	next   int
	log    []string
}

const glProject = "/api/v4/projects/grp%2Fsub%2Fhello"

func newFakeGitLab(t *testing.T) (*fakeGitLab, *httptest.Server) {
	f := &fakeGitLab{t: t, mrs: map[int]map[string]any{}, labels: map[int][]string{}, next: 1}
	// A merge request from a fork with the same branch name: not ours.
	f.mrs[1] = map[string]any{"title": "fork", "description": "", "source_branch": "agentbox/fix/ws1", "target_branch": "main", "state": "opened", "source_project_id": 99}
	f.next = 2
	srv := httptest.NewServer(f)
	t.Cleanup(srv.Close)
	return f, srv
}

func (f *fakeGitLab) reply(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(v)
}

func (f *fakeGitLab) mrJSON(iid int) map[string]any {
	m := f.mrs[iid]
	return map[string]any{
		"id": 500 + iid, "iid": iid, "project_id": 7, "source_project_id": m["source_project_id"], "target_project_id": 7,
		"title": m["title"], "description": m["description"], "state": m["state"],
		"source_branch": m["source_branch"], "target_branch": m["target_branch"],
		"labels":  f.labels[iid],
		"web_url": "https://gitlab.example.com/grp/sub/hello/-/merge_requests/" + strconv.Itoa(iid),
	}
}

// splitLabels reads GitLab's comma-separated label list.
func splitLabels(v any) []string {
	s, _ := v.(string)
	if s == "" {
		return nil
	}
	return strings.Split(s, ",")
}

func (f *fakeGitLab) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	path := r.URL.EscapedPath()
	f.log = append(f.log, r.Method+" "+path)
	tok := r.Header.Get("PRIVATE-TOKEN")
	if a := r.Header.Get("Authorization"); strings.HasPrefix(a, "Bearer ") {
		tok = strings.TrimPrefix(a, "Bearer ")
	}
	if tok != glToken {
		f.reply(w, 401, map[string]any{"message": "401 Unauthorized"})
		return
	}
	var body map[string]any
	if r.Method == http.MethodPost || r.Method == http.MethodPut {
		if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
			f.reply(w, 400, map[string]any{"error": "body is invalid JSON"})
			return
		}
	}
	if !strings.HasPrefix(path, glProject) {
		f.reply(w, 404, map[string]any{"message": "404 Project Not Found"})
		return
	}
	rest := strings.TrimPrefix(path, glProject)
	switch {
	case r.Method == http.MethodGet && rest == "":
		f.reply(w, 200, map[string]any{"id": 7, "path_with_namespace": "grp/sub/hello", "default_branch": "develop"})
	case r.Method == http.MethodGet && rest == "/merge_requests":
		q := r.URL.Query()
		list := []map[string]any{}
		for iid := 1; iid < f.next; iid++ {
			m := f.mrs[iid]
			if (q.Get("state") == "" || q.Get("state") == m["state"]) && (q.Get("source_branch") == "" || q.Get("source_branch") == m["source_branch"]) {
				list = append(list, f.mrJSON(iid))
			}
		}
		f.reply(w, 200, list)
	case r.Method == http.MethodPost && rest == "/merge_requests":
		for _, k := range []string{"source_branch", "target_branch", "title"} {
			if s, _ := body[k].(string); s == "" {
				f.reply(w, 400, map[string]any{"error": k + " is missing"})
				return
			}
		}
		for iid := 1; iid < f.next; iid++ {
			m := f.mrs[iid]
			if m["state"] == "opened" && m["source_project_id"] == 7 && m["source_branch"] == body["source_branch"] && m["target_branch"] == body["target_branch"] {
				f.reply(w, 409, map[string]any{"message": []string{"Another open merge request already exists for this source branch: !" + strconv.Itoa(iid)}})
				return
			}
		}
		iid := f.next
		f.next++
		f.mrs[iid] = map[string]any{"title": body["title"], "description": body["description"], "source_branch": body["source_branch"], "target_branch": body["target_branch"], "state": "opened", "source_project_id": 7}
		f.labels[iid] = splitLabels(body["labels"])
		f.reply(w, 201, f.mrJSON(iid))
	case r.Method == http.MethodPut && strings.HasPrefix(rest, "/merge_requests/"):
		iid, _ := strconv.Atoi(strings.TrimPrefix(rest, "/merge_requests/"))
		m, ok := f.mrs[iid]
		if !ok {
			f.reply(w, 404, map[string]any{"message": "404 Not found"})
			return
		}
		for _, k := range []string{"title", "description", "target_branch"} {
			if v, ok := body[k]; ok {
				m[k] = v
			}
		}
		if _, ok := body["labels"]; ok {
			f.labels[iid] = splitLabels(body["labels"])
		}
		f.labels[iid] = append(f.labels[iid], splitLabels(body["add_labels"])...)
		f.reply(w, 200, f.mrJSON(iid))
	default:
		f.t.Errorf("undocumented request %s %s", r.Method, r.URL)
		f.reply(w, 404, map[string]any{"message": "404 Not found"})
	}
}

func TestGitLab(t *testing.T) {
	fake, srv := newFakeGitLab(t)
	f, err := New(Config{Kind: KindGitLab, APIURL: srv.URL + "/api/v4", Token: glToken})
	if err != nil {
		t.Fatal(err)
	}
	r, err := ParseRemote("https://gitlab.example.com/grp/sub/hello.git")
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	if b, err := f.DefaultBranch(ctx, r); err != nil || b != "develop" {
		t.Fatalf("DefaultBranch = %q, %v; want develop", b, err)
	}

	req := PRRequest{Head: "agentbox/fix/ws1", Base: "develop", Title: "Fix it", Body: "evidence", Labels: []string{"agentbox", "ai"}}
	pr, err := f.OpenOrUpdatePR(ctx, r, req)
	if err != nil {
		t.Fatal(err)
	}
	want := PR{Number: 2, URL: "https://gitlab.example.com/grp/sub/hello/-/merge_requests/2", State: "opened"}
	if d := cmp.Diff(want, pr); d != "" {
		t.Errorf("first OpenOrUpdatePR (-want +got):\n%s", d)
	}

	req.Title, req.Body, req.Labels = "Fix it, take 2", "more evidence", []string{"ready"}
	pr, err = f.OpenOrUpdatePR(ctx, r, req)
	if err != nil {
		t.Fatal(err)
	}
	want.Updated = true
	if d := cmp.Diff(want, pr); d != "" {
		t.Errorf("second OpenOrUpdatePR (-want +got):\n%s", d)
	}
	fake.mu.Lock()
	if m := fake.mrs[2]; m["title"] != "Fix it, take 2" || m["description"] != "more evidence" {
		t.Errorf("merge request 2 after update: %v", m)
	}
	if m := fake.mrs[1]; m["title"] != "fork" {
		t.Errorf("the fork's merge request was touched: %v", m)
	}
	if d := cmp.Diff([]string{"agentbox", "ai", "ready"}, fake.labels[2]); d != "" {
		t.Errorf("labels (-want +got):\n%s", d)
	}
	wantLog := []string{
		"GET " + glProject,
		"GET " + glProject + "/merge_requests", "POST " + glProject + "/merge_requests",
		"GET " + glProject + "/merge_requests", "PUT " + glProject + "/merge_requests/2",
	}
	if d := cmp.Diff(wantLog, fake.log); d != "" {
		t.Errorf("requests (-want +got):\n%s", d)
	}
	fake.mu.Unlock()

	if _, err := f.OpenOrUpdatePR(ctx, r, PRRequest{Head: "x", Base: "develop", Title: "t", Labels: []string{"a,b"}}); !errors.Is(err, errdefs.ErrInvalid) {
		t.Errorf("label with a comma: %v; want ErrInvalid", err)
	}

	nope := Remote{Host: r.Host, Owner: "grp/sub", Repo: "nope"}
	_, err = f.DefaultBranch(ctx, nope)
	if !errors.Is(err, errdefs.ErrNotFound) || !strings.Contains(err.Error(), "gitlab grp/sub/nope") || !strings.Contains(err.Error(), "404") {
		t.Errorf("unknown project: %v; want not found naming gitlab grp/sub/nope 404", err)
	}

	bad, _ := New(Config{Kind: KindGitLab, APIURL: srv.URL + "/api/v4", Token: "glpat-WRONG-must-not-leak"})
	_, err = bad.OpenOrUpdatePR(ctx, r, req)
	checkAuthError(t, err, "gitlab", "grp/sub/hello", "glpat-WRONG-must-not-leak")
}

// TestGitLabDefaultAPIURL: without APIURL the API is https://HOST/api/v4,
// and the project's path is sent encoded, in one segment.
func TestGitLabDefaultAPIURL(t *testing.T) {
	var got string
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got = r.URL.EscapedPath()
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, `{"default_branch":"main"}`)
	}))
	defer srv.Close()
	f, err := New(Config{Kind: KindGitLab, Token: glToken, HTTPClient: srv.Client()})
	if err != nil {
		t.Fatal(err)
	}
	host := strings.TrimPrefix(srv.URL, "https://")
	if _, err := f.DefaultBranch(t.Context(), Remote{Host: host, Owner: "a/b", Repo: "c"}); err != nil {
		t.Fatal(err)
	}
	if got != "/api/v4/projects/a%2Fb%2Fc" {
		t.Errorf("path %q, want /api/v4/projects/a%%2Fb%%2Fc", got)
	}
}
