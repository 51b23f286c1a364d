package forge

import (
	"bytes"
	"encoding/json"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/agentbox/agentbox/internal/errdefs"
	"github.com/agentbox/agentbox/internal/testutil"
	"github.com/google/go-cmp/cmp"
)

// giteaPullState is what the test reads back from Gitea itself.
type giteaPullState struct {
	Number int    `json:"number"`
	Title  string `json:"title"`
	Body   string `json:"body"`
	State  string `json:"state"`
	Head   struct {
		Ref string `json:"ref"`
	} `json:"head"`
	Base struct {
		Ref string `json:"ref"`
	} `json:"base"`
	Labels []struct {
		Name string `json:"name"`
	} `json:"labels"`
}

func (p giteaPullState) labelNames() []string {
	var out []string
	for _, l := range p.Labels {
		out = append(out, l.Name)
	}
	slices.Sort(out)
	return out
}

// pushBranch clones url, commits files on a new branch and pushes it.
func pushBranch(t *testing.T, g *testutil.Gitea, url, branch string, files map[string]string) {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "clone")
	testutil.Git(t, "", "-c", "http.extraHeader="+g.GitAuthHeader(), "clone", "-q", url, dir)
	testutil.Git(t, dir, "checkout", "-q", "-b", branch)
	for p, c := range files {
		if err := os.WriteFile(filepath.Join(dir, p), []byte(c), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	testutil.Git(t, dir, "add", "-A")
	testutil.Git(t, dir, "commit", "-q", "-m", "change on "+branch)
	g.Push(t, dir, url, "HEAD:refs/heads/"+branch)
}

func TestGiteaReal(t *testing.T) {
	g := testutil.StartGitea(t)
	url := g.CreateRepo(t, "hello", map[string]string{"README.md": "hello\n"})
	r, err := ParseRemote(url)
	if err != nil {
		t.Fatal(err)
	}
	if r.Owner != g.User || r.Repo != "hello" {
		t.Fatalf("ParseRemote(%q) = %+v", url, r)
	}
	f, err := New(Config{Kind: KindGitea, APIURL: g.APIURL, Token: g.Token, HTTPClient: g.HTTPClient})
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()

	t.Run("DefaultBranch", func(t *testing.T) {
		b, err := f.DefaultBranch(ctx, r)
		if err != nil || b != "main" {
			t.Fatalf("DefaultBranch = %q, %v; want main", b, err)
		}
	})

	const head = "agentbox/fix-readme/ws_1"
	pushBranch(t, g, url, head, map[string]string{"README.md": "hello, world\n"})
	// One label exists already; the other is created.
	g.API(t, http.MethodPost, "/repos/"+r.String()+"/labels", map[string]any{"name": "agentbox", "color": "#00aabb"}, nil)

	var first PR
	t.Run("Open", func(t *testing.T) {
		pr, err := f.OpenOrUpdatePR(ctx, r, PRRequest{
			Head: head, Base: "main", Title: "Fix the README", Body: "Tests: 3 passed",
			Labels: []string{"agentbox", "ready-for-review"},
		})
		if err != nil {
			t.Fatal(err)
		}
		if pr.Number < 1 || pr.Updated || pr.State != "open" || pr.URL != g.URL+"/"+r.String()+"/pulls/"+itoa(pr.Number) || len(pr.Notes) > 0 {
			t.Fatalf("OpenOrUpdatePR = %+v", pr)
		}
		first = pr
		var got giteaPullState
		g.API(t, http.MethodGet, "/repos/"+r.String()+"/pulls/"+itoa(pr.Number), nil, &got)
		if got.Title != "Fix the README" || got.Body != "Tests: 3 passed" || got.Head.Ref != head || got.Base.Ref != "main" || got.State != "open" {
			t.Errorf("the PR in Gitea: %+v", got)
		}
		if d := cmp.Diff([]string{"agentbox", "ready-for-review"}, got.labelNames()); d != "" {
			t.Errorf("labels (-want +got):\n%s", d)
		}
	})

	t.Run("Update", func(t *testing.T) {
		if first.Number == 0 {
			t.Fatal("Open failed: there is no PR to update")
		}
		pr, err := f.OpenOrUpdatePR(ctx, r, PRRequest{
			Head: head, Base: "main", Title: "Fix the README (take 2)", Body: "Tests: 4 passed",
			Labels: []string{"second-round"},
		})
		if err != nil {
			t.Fatal(err)
		}
		want := first
		want.Updated = true
		if d := cmp.Diff(want, pr); d != "" {
			t.Errorf("second OpenOrUpdatePR (-want +got):\n%s", d)
		}
		var got giteaPullState
		g.API(t, http.MethodGet, "/repos/"+r.String()+"/pulls/"+itoa(pr.Number), nil, &got)
		if got.Title != "Fix the README (take 2)" || got.Body != "Tests: 4 passed" {
			t.Errorf("the PR in Gitea after the update: %+v", got)
		}
		// Labels are added, never removed.
		if d := cmp.Diff([]string{"agentbox", "ready-for-review", "second-round"}, got.labelNames()); d != "" {
			t.Errorf("labels after the update (-want +got):\n%s", d)
		}
		var open []giteaPullState
		g.API(t, http.MethodGet, "/repos/"+r.String()+"/pulls?state=all", nil, &open)
		if len(open) != 1 {
			t.Errorf("%d pull requests in the repository, want 1", len(open))
		}
	})

	t.Run("LabelsWithoutScope", func(t *testing.T) {
		// A token that may write the repository but not issues: the PR is
		// made, the label that would have to be created is a note.
		tok := newGiteaToken(t, g, "no-issue-scope", []string{"write:repository"})
		fr, err := New(Config{Kind: KindGitea, APIURL: g.APIURL, Token: tok, HTTPClient: g.HTTPClient})
		if err != nil {
			t.Fatal(err)
		}
		pushBranch(t, g, url, "agentbox/other/ws_2", map[string]string{"NEW.md": "new\n"})
		pr, err := fr.OpenOrUpdatePR(ctx, r, PRRequest{Head: "agentbox/other/ws_2", Base: "main", Title: "Other", Labels: []string{"never-made"}})
		if err != nil {
			t.Fatal(err)
		}
		if pr.Number == first.Number || pr.Updated {
			t.Errorf("a second branch's PR = %+v; want a new one", pr)
		}
		if len(pr.Notes) == 0 || !strings.Contains(strings.Join(pr.Notes, "\n"), `"never-made"`) {
			t.Errorf("notes %q: want one naming the label never-made", pr.Notes)
		}
		t.Logf("notes: %q", pr.Notes)
		if strings.Contains(strings.Join(pr.Notes, "\n"), tok) {
			t.Errorf("a note holds the token: %q", pr.Notes)
		}
	})

	t.Run("BadToken", func(t *testing.T) {
		const bad = "0123456789abcdef0123456789abcdef01234567"
		fb, err := New(Config{Kind: KindGitea, APIURL: g.APIURL, Token: bad, HTTPClient: g.HTTPClient})
		if err != nil {
			t.Fatal(err)
		}
		_, err = fb.OpenOrUpdatePR(ctx, r, PRRequest{Head: head, Base: "main", Title: "x"})
		checkAuthError(t, err, "gitea", r.String(), bad)
		_, err = fb.DefaultBranch(ctx, r)
		checkAuthError(t, err, "gitea", r.String(), bad)
	})

	t.Run("UnknownRepo", func(t *testing.T) {
		nope := Remote{Host: r.Host, Owner: r.Owner, Repo: "nope"}
		_, err := f.DefaultBranch(ctx, nope)
		if !errors.Is(err, errdefs.ErrNotFound) || !strings.Contains(err.Error(), "gitea "+nope.String()) || !strings.Contains(err.Error(), "404") {
			t.Errorf("DefaultBranch of an unknown repo: %v; want not found naming gitea %s and 404", err, nope)
		}
		_, err = f.OpenOrUpdatePR(ctx, nope, PRRequest{Head: head, Base: "main", Title: "x"})
		if !errors.Is(err, errdefs.ErrNotFound) || strings.Contains(err.Error(), g.Token) {
			t.Errorf("OpenOrUpdatePR on an unknown repo: %v; want not found", err)
		}
	})

	t.Run("UnknownBranch", func(t *testing.T) {
		_, err := f.OpenOrUpdatePR(ctx, r, PRRequest{Head: "not-pushed", Base: "main", Title: "x"})
		t.Logf("error: %v", err)
		if err == nil || !strings.Contains(err.Error(), "gitea "+r.String()) {
			t.Errorf("PR from a branch never pushed: %v; want an error naming the repo", err)
		}
	})
}

// newGiteaToken makes another token of the admin with scopes, through the
// API with the admin's password (tokens cannot make tokens).
func newGiteaToken(t *testing.T, g *testutil.Gitea, name string, scopes []string) string {
	t.Helper()
	b, _ := json.Marshal(map[string]any{"name": name, "scopes": scopes})
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, g.APIURL+"/users/"+g.User+"/tokens", bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	req.SetBasicAuth(g.User, g.Password)
	req.Header.Set("Content-Type", "application/json")
	resp, err := g.HTTPClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out struct {
		SHA1 string `json:"sha1"`
	}
	if resp.StatusCode != http.StatusCreated {
		t.Fatalf("creating a token: %s", resp.Status)
	}
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil || out.SHA1 == "" {
		t.Fatalf("creating a token: %v %+v", err, out)
	}
	return out.SHA1
}

func itoa(n int) string { return strconv.Itoa(n) }
