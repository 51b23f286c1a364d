package forge

import (
	"errors"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/agentbox/agentbox/internal/errdefs"
	"github.com/google/go-cmp/cmp"
)

func TestParseRemote(t *testing.T) {
	good := []struct {
		in   string
		want Remote
	}{
		{"https://github.com/octo/hello.git", Remote{Host: "github.com", Owner: "octo", Repo: "hello"}},
		{"https://github.com/octo/hello", Remote{Host: "github.com", Owner: "octo", Repo: "hello"}},
		{"https://github.com/octo/hello/", Remote{Host: "github.com", Owner: "octo", Repo: "hello"}},
		{"https://GitLab.Example.com/a/b/c.git", Remote{Host: "gitlab.example.com", Owner: "a/b", Repo: "c"}},
		{"http://127.0.0.1:3000/admin/my-repo_1.x.git", Remote{Host: "127.0.0.1:3000", Owner: "admin", Repo: "my-repo_1.x"}},
		{"http://[::1]:3000/admin/r", Remote{Host: "[::1]:3000", Owner: "admin", Repo: "r"}},
		{"http://localhost/admin/r", Remote{Host: "localhost", Owner: "admin", Repo: "r"}},
	}
	for _, c := range good {
		got, err := ParseRemote(c.in)
		if err != nil {
			t.Errorf("ParseRemote(%q): %v", c.in, err)
			continue
		}
		if d := cmp.Diff(c.want, got); d != "" {
			t.Errorf("ParseRemote(%q) (-want +got):\n%s", c.in, d)
		}
	}
	bad := []string{
		"",
		"github.com/octo/hello",
		"git@github.com:octo/hello.git",
		"ssh://git@github.com/octo/hello.git",
		"file:///srv/git/hello.git",
		"ext::sh -c touch% /tmp/x",
		"https://user:s3cret-token@github.com/octo/hello.git",
		"https://s3cret-token@github.com/octo/hello.git",
		"https://github.com/hello.git",
		"https://github.com/",
		"https:///octo/hello",
		"https://github.com/octo/../hello",
		"https://github.com/octo/./hello",
		"https://github.com/octo//hello",
		"https://github.com/octo/hel%2flo",
		"https://github.com/octo/hello?x=1",
		"https://github.com/octo/hello#frag",
		"https://github.com/octo/hel lo",
		"https://github.com/octo/hel\\lo",
		"https://github.com/octo/hel;lo",
		"https://github.com/octo/hello\n",
		"http://github.com/octo/hello.git",
		"http://10.0.0.1/octo/hello.git",
	}
	for _, in := range bad {
		_, err := ParseRemote(in)
		if !errors.Is(err, errdefs.ErrInvalid) {
			t.Errorf("ParseRemote(%q) = %v, want ErrInvalid", in, err)
			continue
		}
		if strings.Contains(err.Error(), "s3cret-token") {
			t.Errorf("ParseRemote(%q): the error shows the credentials: %v", in, err)
		}
	}
}

func TestNewRefuses(t *testing.T) {
	for _, c := range []Config{
		{Kind: "github"},
		{Kind: "bitbucket", Token: "t"},
		{Kind: "gitlab", Token: "t\nX-Evil: 1"},
		{Kind: "gitea", Token: "t", APIURL: "ftp://example.invalid/api"},
		{Kind: "gitea", Token: "t", APIURL: "https://u:p@example.invalid/api/v1"},
		{Kind: "gitea", Token: "t", APIURL: "http://gitea.example.invalid/api/v1"},
	} {
		if _, err := New(c); !errors.Is(err, errdefs.ErrInvalid) {
			t.Errorf("New(%+v) = %v, want ErrInvalid", c, err)
		}
	}
}

func TestRemoteValidation(t *testing.T) {
	for _, kind := range []string{KindGitHub, KindGitLab, KindGitea} {
		f, err := New(Config{Kind: kind, Token: "t", APIURL: "http://127.0.0.1:1"})
		if err != nil {
			t.Fatal(err)
		}
		bad := []Remote{{Host: "h", Owner: "", Repo: "r"}, {Host: "h", Owner: "o", Repo: ""}, {Host: "h", Owner: "..", Repo: "r"}, {Host: "h", Owner: "o", Repo: ".."}, {Host: "h", Owner: "o/../x", Repo: "r"}, {Host: "h", Owner: "o", Repo: "r?x=1"}, {Host: "h", Owner: "o", Repo: "r/pulls"}}
		if kind != KindGitLab {
			bad = append(bad, Remote{Host: "h", Owner: "a/b", Repo: "r"})
		}
		for _, r := range bad {
			if _, err := f.DefaultBranch(t.Context(), r); !errors.Is(err, errdefs.ErrInvalid) {
				t.Errorf("%s DefaultBranch(%+v) = %v, want ErrInvalid", kind, r, err)
			}
			if _, err := f.OpenOrUpdatePR(t.Context(), r, PRRequest{Head: "x", Base: "main", Title: "t"}); !errors.Is(err, errdefs.ErrInvalid) {
				t.Errorf("%s OpenOrUpdatePR(%+v) = %v, want ErrInvalid", kind, r, err)
			}
		}
	}
}

func TestRequestValidation(t *testing.T) {
	f, err := New(Config{Kind: KindGitHub, Token: "t", APIURL: "http://127.0.0.1:1"})
	if err != nil {
		t.Fatal(err)
	}
	r := Remote{Host: "github.com", Owner: "o", Repo: "r"}
	for _, req := range []PRRequest{
		{Head: "", Base: "main", Title: "x"},
		{Head: "main", Base: "main", Title: "x"},
		{Head: "a b", Base: "main", Title: "x"},
		{Head: "-x", Base: "main", Title: "x"},
		{Head: "a..b", Base: "main", Title: "x"},
		{Head: "feature", Base: "main", Title: " "},
		{Head: "feature", Base: "main", Title: "x", Labels: []string{""}},
	} {
		// The API URL answers nothing: a request that got past validation
		// would fail as unavailable, not invalid.
		if _, err := f.OpenOrUpdatePR(t.Context(), r, req); !errors.Is(err, errdefs.ErrInvalid) {
			t.Errorf("OpenOrUpdatePR(%+v) = %v, want ErrInvalid", req, err)
		}
	}
}

func TestFitBody(t *testing.T) {
	if b, n := fitBody("short", 10); b != "short" || n != nil {
		t.Errorf("fitBody(short) = %q, %q", b, n)
	}
	long := strings.Repeat("é", 70000)
	b, n := fitBody(long, githubMaxBody)
	if c := utf8.RuneCountInString(b); c != githubMaxBody || !utf8.ValidString(b) || !strings.HasSuffix(b, "characters]") || len(n) != 1 {
		t.Errorf("fitBody(70000 runes) = %d runes, valid %v, notes %q", c, utf8.ValidString(b), n)
	}
}
