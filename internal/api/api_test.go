package api_test

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/agentbox/agentbox/client"
	"github.com/agentbox/agentbox/internal/api"
	"github.com/agentbox/agentbox/internal/manager"
	"github.com/agentbox/agentbox/internal/store/sqlstore"
	"github.com/agentbox/agentbox/internal/testutil"
)

type fixture struct {
	srv *httptest.Server
	cl  *client.Client
	m   *manager.Manager
}

func newFixture(t *testing.T, token string, wrap ...func(http.Handler) http.Handler) *fixture {
	data := t.TempDir()
	st, err := sqlstore.Open(t.Context(), filepath.Join(data, "agentbox.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	m, err := manager.New(t.Context(), st, manager.Config{DataDir: data, UID: 1000, GID: 1000})
	if err != nil {
		t.Fatal(err)
	}
	var h http.Handler = api.New(m, api.Options{Token: token})
	for _, w := range wrap {
		h = w(h)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	cl, err := client.New(srv.URL, token)
	if err != nil {
		t.Fatal(err)
	}
	f := &fixture{srv: srv, cl: cl, m: m}
	t.Cleanup(func() {
		ctx := context.Background() // t.Context is already cancelled here
		wss, _ := m.ListWorkspaces(ctx, manager.ListFilter{})
		for _, w := range wss {
			if err := m.RemoveWorkspace(ctx, w.ID); err != nil {
				t.Errorf("cleanup: %v", err)
			}
		}
	})
	return f
}

// TestOpenAPIMatchesRoutes checks that the served document lists exactly
// the routes the server answers, and that each documented route is
// answered by a handler (not the catch-all 404).
func TestOpenAPIMatchesRoutes(t *testing.T) {
	f := newFixture(t, "")
	raw, err := f.cl.OpenAPI(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		OpenAPI string                                `json:"openapi"`
		Paths   map[string]map[string]json.RawMessage `json:"paths"`
	}
	if err := json.Unmarshal(raw, &doc); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(doc.OpenAPI, "3.") {
		t.Fatalf("openapi = %q, want 3.x", doc.OpenAPI)
	}
	var documented []string
	for path, ops := range doc.Paths {
		for method, op := range ops {
			if method == "parameters" {
				continue
			}
			var o struct {
				OperationID string                     `json:"operationId"`
				Responses   map[string]json.RawMessage `json:"responses"`
			}
			json.Unmarshal(op, &o)
			if o.OperationID == "" || len(o.Responses) == 0 {
				t.Errorf("%s %s: missing operationId or responses", method, path)
			}
			documented = append(documented, strings.ToUpper(method)+" "+path)
		}
	}
	sort.Strings(documented)
	served := api.Routes()
	sort.Strings(served)
	if d := cmp.Diff(served, documented); d != "" {
		t.Errorf("routes vs openapi.json (-served +documented):\n%s", d)
	}
	// Every documented route reaches its handler: the catch-all answers
	// "no API route", a handler never does.
	for _, r := range documented {
		method, path, _ := strings.Cut(r, " ")
		path = strings.ReplaceAll(path, "{id}", "x_unknown")
		req, _ := http.NewRequestWithContext(t.Context(), method, f.srv.URL+path, strings.NewReader("{}"))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if strings.Contains(string(body), "no API route") || resp.StatusCode == http.StatusMethodNotAllowed {
			t.Errorf("%s: not served (%d %s)", r, resp.StatusCode, body)
		}
	}
}

func TestErrorsAndStatusCodes(t *testing.T) {
	f := newFixture(t, "")
	src := testutil.NewRepo(t, map[string]string{"a.txt": "a\n"})
	ws, err := f.cl.CreateWorkspace(t.Context(), client.CreateWorkspace{Repo: src.Dir})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, method, path, body string
		status                   int
		code                     string
		msgHas                   string
	}{
		{"unknown workspace", "GET", "/v1/workspaces/ws_123", "", 404, "not_found", "workspace ws_123 not found"},
		{"unknown repo", "GET", "/v1/repos/repo_aaaaaaaaaaaa", "", 404, "not_found", "repo_aaaaaaaaaaaa"},
		{"bad url", "POST", "/v1/repos", `{"url":"ftp://x.invalid/r"}`, 400, "invalid", "scheme"},
		{"unknown field", "POST", "/v1/workspaces", `{"repo":"x","bogus":1}`, 400, "invalid", "bogus"},
		{"empty body", "POST", "/v1/workspaces", ``, 400, "invalid", "empty"},
		{"unknown ref", "POST", "/v1/workspaces", `{"repo":"` + ws.RepoID + `","ref":"nope"}`, 404, "not_found", `ref "nope" not found`},
		{"bad branch", "POST", "/v1/workspaces", `{"repo":"` + ws.RepoID + `","branch":"a..b"}`, 400, "invalid", "branch"},
		{"path outside root", "GET", "/v1/workspaces/" + ws.ID + "/files?path=../../etc/passwd", "", 400, "invalid", ws.ID},
		{"absolute path", "GET", "/v1/workspaces/" + ws.ID + "/files?path=/etc/passwd", "", 400, "invalid", "/etc/passwd"},
		{"missing file", "GET", "/v1/workspaces/" + ws.ID + "/files?path=nope.txt", "", 404, "not_found", "nope.txt"},
		{"missing path param", "GET", "/v1/workspaces/" + ws.ID + "/files", "", 400, "invalid", "path"},
		{"bad mode", "PUT", "/v1/workspaces/" + ws.ID + "/files?path=x&mode=999", "x", 400, "invalid", "mode"},
		{"empty commit message", "POST", "/v1/workspaces/" + ws.ID + "/commit", `{"message":" "}`, 400, "invalid", "message"},
		{"nothing to commit", "POST", "/v1/workspaces/" + ws.ID + "/commit", `{"message":"x"}`, 409, "conflict", "nothing to commit"},
		{"repo in use", "DELETE", "/v1/repos/" + ws.RepoID, "", 409, "conflict", ws.ID},
		{"bad limit", "GET", "/v1/events?limit=0", "", 400, "invalid", "limit"},
		{"no route", "GET", "/v1/nothing", "", 404, "not_found", "no API route"},
		{"repo name not an ID", "GET", "/v1/repos/repo_nope", "", 404, "not_found", "repo_nope"},
		{"exec in an unknown workspace", "POST", "/v1/workspaces/ws_nope/exec", `{"argv":["true"]}`, 404, "not_found", "workspace ws_nope not found"},
		{"exec in an unknown sandbox", "POST", "/v1/sandboxes/sb_aaaaaaaaaaaa/exec", `{"sh":"true"}`, 404, "not_found", "sb_aaaaaaaaaaaa"},
		{"exec argv and sh", "POST", "/v1/workspaces/" + ws.ID + "/exec", `{"argv":["true"],"sh":"true"}`, 400, "invalid", "not both"},
		{"exec nothing", "POST", "/v1/workspaces/" + ws.ID + "/exec", `{}`, 400, "invalid", "empty"},
		{"edit no match", "POST", "/v1/workspaces/" + ws.ID + "/files/edit", `{"path":"a.txt","old":"zz","new":"y"}`, 409, "conflict", "not in the file"},
		{"edit outside", "POST", "/v1/workspaces/" + ws.ID + "/files/edit", `{"path":"../a.txt","old":"a","new":"y"}`, 400, "invalid", "../a.txt"},
		{"edit nothing", "POST", "/v1/workspaces/" + ws.ID + "/files/edit", `{"path":"a.txt","old":"","new":"y"}`, 400, "invalid", "empty"},
		{"find bad glob", "POST", "/v1/workspaces/" + ws.ID + "/files/find", `{"pattern":"[x"}`, 400, "invalid", "glob"},
		{"find unknown type", "POST", "/v1/workspaces/" + ws.ID + "/files/find", `{"pattern":"*","type":"pipe"}`, 400, "invalid", "pipe"},
		{"bad line range", "GET", "/v1/workspaces/" + ws.ID + "/files?path=a.txt&lines=5:2", "", 400, "invalid", "line range"},
		{"lines and bytes", "GET", "/v1/workspaces/" + ws.ID + "/files?path=a.txt&lines=1&bytes=0:1", "", 400, "invalid", "not both"},
		{"bad byte range", "GET", "/v1/workspaces/" + ws.ID + "/files?path=a.txt&bytes=x", "", 400, "invalid", "byte range"},
		{"bad depth", "GET", "/v1/workspaces/" + ws.ID + "/files/list?depth=0", "", 400, "invalid", "depth"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req, _ := http.NewRequestWithContext(t.Context(), tt.method, f.srv.URL+tt.path, strings.NewReader(tt.body))
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			var eb api.ErrorBody
			if err := json.NewDecoder(resp.Body).Decode(&eb); err != nil {
				t.Fatal(err)
			}
			if resp.StatusCode != tt.status || eb.Error.Code != tt.code || !strings.Contains(eb.Error.Message, tt.msgHas) {
				t.Errorf("got %d %q %q; want %d %q containing %q", resp.StatusCode, eb.Error.Code, eb.Error.Message, tt.status, tt.code, tt.msgHas)
			}
		})
	}
	// None of the refused requests changed anything.
	wss, _ := f.cl.ListWorkspaces(t.Context(), "", "")
	repos, _ := f.cl.ListRepos(t.Context())
	if len(wss) != 1 || len(repos) != 1 {
		t.Errorf("after bad requests: %d workspaces, %d repos; want 1 and 1", len(wss), len(repos))
	}
	// The client rebuilds the class.
	if _, err := f.cl.GetWorkspace(t.Context(), "ws_nope"); !errors.Is(err, client.ErrNotFound) {
		t.Errorf("client error class: %v", err)
	}
}

func TestBearerToken(t *testing.T) {
	const token = "0123456789abcdef-token"
	f := newFixture(t, token)
	if _, err := f.cl.Health(t.Context()); err != nil {
		t.Fatalf("with token: %v", err)
	}
	for _, bad := range []string{"", "wrong-token-0123456789"} {
		cl, _ := client.New(f.srv.URL, bad)
		if _, err := cl.ListRepos(t.Context()); !errors.Is(err, client.ErrUnauthorized) {
			t.Errorf("token %q: err = %v, want unauthorized", bad, err)
		}
	}
}

func TestFilesRoundTripAndProgress(t *testing.T) {
	f := newFixture(t, "")
	src := testutil.NewRepo(t, testutil.ManyFiles(300))
	var lines []string
	r, err := f.cl.AddRepo(t.Context(), "file://"+src.Dir, func(l string) { lines = append(lines, l) })
	if err != nil || !r.Cloned {
		t.Fatalf("AddRepo = %+v, %v", r, err)
	}
	if len(lines) == 0 {
		t.Error("no progress lines streamed during the clone")
	}
	again, err := f.cl.AddRepo(t.Context(), "file://"+src.Dir, nil)
	if err != nil || again.Cloned || again.ID != r.ID {
		t.Errorf("second add = %+v, %v; want the cached repo", again, err)
	}
	ws, err := f.cl.CreateWorkspace(t.Context(), client.CreateWorkspace{Repo: r.ID, Task: "t"})
	if err != nil {
		t.Fatal(err)
	}
	content := "binary\x00\xff data\n"
	if _, err := f.cl.WriteFile(t.Context(), ws.ID, "deep/er/x.bin", strings.NewReader(content), 0o600, true); err != nil {
		t.Fatal(err)
	}
	var got strings.Builder
	if _, err := f.cl.ReadFile(t.Context(), ws.ID, "deep/er/x.bin", &got); err != nil || got.String() != content {
		t.Fatalf("read back %q, %v", got.String(), err)
	}
	fi, err := f.cl.StatFile(t.Context(), ws.ID, "deep/er/x.bin")
	if err != nil || fi.Mode != "0600" || fi.Size != int64(len(content)) {
		t.Errorf("stat = %+v, %v", fi, err)
	}
	res, err := f.cl.Grep(t.Context(), ws.ID, client.GrepRequest{Pattern: "line one of 12[0-9]$", Path: "pkg000"})
	if err != nil || len(res.Matches) != 10 {
		t.Errorf("grep = %d matches, %v; want 10", len(res.Matches), err)
	}
	st, err := f.cl.Status(t.Context(), ws.ID)
	if err != nil || !st.Dirty || len(st.Changes) != 1 || st.Changes[0].Path != "deep/er/x.bin" {
		t.Errorf("status = %+v, %v", st, err)
	}
	ev, _ := f.cl.Events(t.Context(), client.EventFilter{Workspace: ws.ID, Type: "file.written"})
	if len(ev) != 1 {
		t.Errorf("file.written events = %d, want 1", len(ev))
	}
}

// TestAgentFileTools runs the file tools shaped for agents through HTTP and
// the Go client: ranged reads, edits, find, recursive listings.
func TestAgentFileTools(t *testing.T) {
	f := newFixture(t, "")
	src := testutil.NewRepo(t, map[string]string{"main.go": "package main\n\nfunc main() {\n\tprintln(1)\n}\n", "pkg/a/a.go": "package a\n", "pkg/a/a_test.go": "package a\n"})
	ws, err := f.cl.CreateWorkspace(t.Context(), client.CreateWorkspace{Repo: src.Dir})
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	fc, err := f.cl.ReadFileContent(ctx, ws.ID, "main.go", client.Range{FirstLine: 3, LastLine: 4})
	want := []client.Line{{N: 3, Text: "func main() {"}, {N: 4, Text: "\tprintln(1)"}}
	if err != nil || !cmp.Equal(fc.Lines, want) || fc.Content != "func main() {\n\tprintln(1)\n" || fc.EOF {
		t.Errorf("lines 3:4 = %+v, %v", fc, err)
	}
	var raw strings.Builder
	if _, err := f.cl.ReadFileRange(ctx, ws.ID, "main.go", client.Range{Offset: 8, Length: 4}, &raw); err != nil || raw.String() != "main" {
		t.Errorf("bytes 8:4 = %q, %v", raw.String(), err)
	}
	if whole, err := f.cl.ReadFileContent(ctx, ws.ID, "pkg/a/a.go", client.Range{}); err != nil || whole.Content != "package a\n" || !whole.EOF || whole.Encoding != "utf-8" {
		t.Errorf("whole file as JSON = %+v, %v", whole, err)
	}
	res, err := f.cl.EditFile(ctx, ws.ID, client.EditRequest{Path: "main.go", Old: "println(1)", New: "println(2)"})
	if err != nil || res.Replacements != 1 || !cmp.Equal(res.Lines, []int{4}) {
		t.Errorf("edit = %+v, %v", res, err)
	}
	var after strings.Builder
	f.cl.ReadFile(ctx, ws.ID, "main.go", &after)
	if !strings.Contains(after.String(), "println(2)") {
		t.Errorf("after the edit: %q", after.String())
	}
	if _, err := f.cl.EditFile(ctx, ws.ID, client.EditRequest{Path: "main.go", Old: "println(1)", New: "x"}); !errors.Is(err, client.ErrConflict) || !strings.Contains(err.Error(), `line 4 is like its first line: "\tprintln(2)"`) {
		t.Errorf("stale edit = %v", err)
	}
	found, err := f.cl.FindFiles(ctx, ws.ID, client.FindRequest{Pattern: "pkg/**/*_test.go"})
	if err != nil || len(found.Matches) != 1 || found.Matches[0].Path != "pkg/a/a_test.go" || found.Truncated {
		t.Errorf("find = %+v, %v", found, err)
	}
	tree, err := f.cl.ListTree(ctx, ws.ID, "pkg", 2)
	var paths []string
	for _, e := range tree.Entries {
		paths = append(paths, e.Path)
	}
	if err != nil || !cmp.Equal(paths, []string{"pkg/a", "pkg/a/a.go", "pkg/a/a_test.go"}) || tree.Depth != 2 {
		t.Errorf("tree = %v %+v, %v", paths, tree, err)
	}
	one, err := f.cl.ListTree(ctx, ws.ID, ".", 0)
	if err != nil || one.Depth != 1 || len(one.Entries) != 3 { // .git, main.go, pkg
		t.Errorf("listing = %+v, %v", one, err)
	}
	if ev, _ := f.cl.Events(ctx, client.EventFilter{Workspace: ws.ID, Type: "file.edited"}); len(ev) != 1 {
		t.Errorf("file.edited events = %d, want 1", len(ev))
	}
	// Empty IDs are unknown objects, named.
	if _, err := f.cl.GetWorkspace(ctx, ""); !errors.Is(err, client.ErrNotFound) || !strings.Contains(err.Error(), `workspace ""`) {
		t.Errorf("empty workspace ID = %v", err)
	}
	if _, err := f.cl.ExecBuffered(ctx, "", client.Exec{Argv: []string{"true"}}, nil); !errors.Is(err, client.ErrNotFound) {
		t.Errorf("exec in an empty target = %v", err)
	}
}

// TestUploadWorkspace: a directory uploaded as a tar stream, plain or
// gzipped, becomes a workspace; bad uploads change nothing.
func TestUploadWorkspace(t *testing.T) {
	f := newFixture(t, "")
	ctx := t.Context()
	var plain bytes.Buffer
	tw := tar.NewWriter(&plain)
	for name, body := range map[string]string{"a.txt": "a\n", "dir/b.txt": "b\n"} {
		tw.WriteHeader(&tar.Header{Name: name, Typeflag: tar.TypeReg, Mode: 0o644, Size: int64(len(body))})
		tw.Write([]byte(body))
	}
	tw.Close()
	var zipped bytes.Buffer
	zw := gzip.NewWriter(&zipped)
	zw.Write(plain.Bytes())
	zw.Close()
	for name, up := range map[string]struct {
		body    []byte
		gzipped bool
	}{"plain": {plain.Bytes(), false}, "gzipped": {zipped.Bytes(), true}} {
		ws, err := f.cl.UploadWorkspace(ctx, client.CreateWorkspace{Task: name, Branch: "up-" + name}, bytes.NewReader(up.body), up.gzipped)
		if err != nil {
			t.Fatalf("%s upload: %v", name, err)
		}
		var got strings.Builder
		f.cl.ReadFile(ctx, ws.ID, "dir/b.txt", &got)
		if got.String() != "b\n" || ws.Task != name || ws.Branch != "up-"+name {
			t.Errorf("%s upload: %+v, dir/b.txt = %q", name, ws, got.String())
		}
		if st, err := f.cl.Status(ctx, ws.ID); err != nil || st.Dirty {
			t.Errorf("%s upload: status %+v, %v", name, st, err)
		}
	}
	before, _ := f.cl.ListRepos(ctx)
	for name, tc := range map[string]struct {
		query, ctype string
		body         []byte
		status       int
		msg          string
	}{
		"unknown option": {"?repo=x", "application/x-tar", plain.Bytes(), 400, "not an option"},
		"bad disk":       {"?disk=lots", "application/x-tar", plain.Bytes(), 400, "disk"},
		"not gzip":       {"", "application/gzip", plain.Bytes(), 400, "gzip"},
		"not tar":        {"", "application/x-tar", []byte(strings.Repeat("x", 2000)), 400, "archive"},
		"bad branch":     {"?branch=a..b", "application/x-tar", plain.Bytes(), 400, "branch"},
	} {
		req, _ := http.NewRequestWithContext(ctx, "POST", f.srv.URL+"/v1/workspaces"+tc.query, bytes.NewReader(tc.body))
		req.Header.Set("Content-Type", tc.ctype)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var eb api.ErrorBody
		json.NewDecoder(resp.Body).Decode(&eb)
		resp.Body.Close()
		if resp.StatusCode != tc.status || !strings.Contains(eb.Error.Message, tc.msg) {
			t.Errorf("%s: %d %+v, want %d mentioning %q", name, resp.StatusCode, eb, tc.status, tc.msg)
		}
	}
	if after, _ := f.cl.ListRepos(ctx); len(after) != len(before) {
		t.Errorf("bad uploads left repos: %d, was %d", len(after), len(before))
	}
}
