package repocache_test

import (
	"bytes"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/agentbox/agentbox/internal/errdefs"
	"github.com/agentbox/agentbox/internal/repocache"
	"github.com/agentbox/agentbox/internal/store"
	"github.com/agentbox/agentbox/internal/store/sqlstore"
	"github.com/agentbox/agentbox/internal/testutil"
)

func TestParseRemote(t *testing.T) {
	local := t.TempDir()
	tests := []struct {
		raw, clean, user, pass string
		bad                    bool
	}{
		{raw: "https://github.com/a/b.git", clean: "https://github.com/a/b.git"},
		{raw: "https://GitHub.com/a/b/", clean: "https://github.com/a/b"},
		{raw: "https://u:tok@example.invalid/a.git", clean: "https://example.invalid/a.git", user: "u", pass: "tok"},
		{raw: "https://tok@example.invalid/a.git", clean: "https://example.invalid/a.git", user: "tok"},
		{raw: "ssh://git@example.invalid/a.git", clean: "ssh://git@example.invalid/a.git"},
		{raw: "ssh://git:pw@example.invalid/a.git", clean: "ssh://example.invalid/a.git", user: "git", pass: "pw"},
		{raw: "git@example.invalid:org/a.git", clean: "git@example.invalid:org/a.git"},
		{raw: "file://" + local, clean: "file://" + local},
		{raw: local, clean: local},
		{raw: "", bad: true},
		{raw: "-uupload-pack=touch /tmp/x", bad: true},
		{raw: "ext::sh -c touch% /tmp/pwned", bad: true},
		{raw: "fd::17", bad: true},
		{raw: "ftp://example.invalid/a", bad: true},
		{raw: "https:///nohost", bad: true},
		{raw: "https://example.invalid/a?x=1", bad: true},
		{raw: "https://example.invalid/a b", bad: true},
		{raw: "file://remote.invalid/x", bad: true},
		{raw: "/definitely/not/here", bad: true},
		{raw: "https://example.invalid/a\n", bad: true},
	}
	for _, tt := range tests {
		t.Run(tt.raw, func(t *testing.T) {
			got, err := repocache.ParseRemote(tt.raw)
			if tt.bad {
				if !errors.Is(err, errdefs.ErrInvalid) {
					t.Fatalf("ParseRemote(%q) = %+v, %v; want ErrInvalid", tt.raw, got, err)
				}
				if err != nil && strings.Contains(err.Error(), "tok") {
					t.Fatalf("error leaks a credential: %v", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got.Clean != tt.clean || got.User != tt.user || got.Password != tt.pass {
				t.Errorf("ParseRemote(%q) = %+v, want clean=%q user=%q pass=%q", tt.raw, got, tt.clean, tt.user, tt.pass)
			}
		})
	}
}

type env struct {
	st    store.Store
	cache *repocache.Cache
	data  string
	logs  *bytes.Buffer
}

func newEnv(t *testing.T) *env {
	data := t.TempDir()
	st, err := sqlstore.Open(t.Context(), filepath.Join(data, "agentbox.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	e := &env{st: st, data: data, logs: &bytes.Buffer{}}
	e.cache = e.newCache(t)
	return e
}

func (e *env) newCache(t *testing.T) *repocache.Cache {
	c, err := repocache.New(e.st, repocache.Options{
		ReposDir: filepath.Join(e.data, "repos"), PristineDir: filepath.Join(e.data, "pristine"),
		LockDir: filepath.Join(e.data, "locks"), UID: -1, GID: -1,
		Logger: slog.New(slog.NewJSONHandler(&lockedBuf{b: e.logs}, nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

type lockedBuf struct {
	mu sync.Mutex
	b  *bytes.Buffer
}

func (l *lockedBuf) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func clones(t *testing.T, st store.Store) int {
	ev, err := st.ListEvents(t.Context(), store.EventFilter{Type: "repo.cloned"})
	if err != nil {
		t.Fatal(err)
	}
	return len(ev)
}

// TestSingleFlight: 8 concurrent adds of one URL through one cache, and 8
// more through a second cache on the same data dir (a second daemon), make
// exactly one clone and all get the same repo.
func TestSingleFlight(t *testing.T) {
	src := testutil.NewRepo(t, testutil.ManyFiles(500))
	e := newEnv(t)
	second := e.newCache(t)
	var wg sync.WaitGroup
	got := make(chan string, 16)
	for i := range 16 {
		c := e.cache
		if i%2 == 1 {
			c = second
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			r, _, err := c.Add(t.Context(), src.Dir, nil)
			if err != nil {
				t.Error(err)
				return
			}
			got <- r.ID
		}()
	}
	wg.Wait()
	close(got)
	seen := map[string]bool{}
	for id := range got {
		seen[id] = true
	}
	if len(seen) != 1 {
		t.Errorf("adds returned %d different repos: %v", len(seen), seen)
	}
	if n := clones(t, e.st); n != 1 {
		t.Errorf("%d clones happened, want exactly 1", n)
	}
	entries, _ := os.ReadDir(filepath.Join(e.data, "repos"))
	if len(entries) != 1 {
		t.Errorf("repos dir has %d entries, want 1 mirror", len(entries))
	}
}

// TestCredentialsNeverStored clones over real smart HTTP with basic auth
// and checks that the secret appears nowhere: DB, mirror config, logs,
// events, error messages.
func TestCredentialsNeverStored(t *testing.T) {
	src := testutil.NewRepo(t, map[string]string{"README.md": "hello\n"})
	root := t.TempDir()
	testutil.Git(t, "", "clone", "-q", "--bare", src.Dir, filepath.Join(root, "proj.git"))
	const secret = "s3cr3t-token-canary"
	srv := testutil.NewHTTPServer(t, root, "bot", secret)
	e := newEnv(t)

	// Without credentials the clone is refused, and nothing is recorded.
	_, _, err := e.cache.Add(t.Context(), srv.URL+"/proj.git", nil)
	if err == nil {
		t.Fatal("clone without credentials succeeded")
	}
	if n := clones(t, e.st); n != 0 {
		t.Fatalf("failed clone recorded %d clones", n)
	}

	withCreds := strings.Replace(srv.URL, "http://", "http://bot:"+secret+"@", 1) + "/proj.git"
	r, cloned, err := e.cache.Add(t.Context(), withCreds, nil)
	if err != nil || !cloned {
		t.Fatalf("Add = %v, %v", cloned, err)
	}
	if r.URL != srv.URL+"/proj.git" {
		t.Errorf("stored URL = %q", r.URL)
	}
	// Wrong password: error names the URL without the secret.
	bad := strings.Replace(srv.URL, "http://", "http://bot:wrong-"+secret+"@", 1) + "/other.git"
	if _, _, err := e.cache.Add(t.Context(), bad, nil); err == nil || strings.Contains(err.Error(), secret) {
		t.Errorf("bad-credential error = %v (must fail and not leak)", err)
	}

	var haystack bytes.Buffer
	filepath.Walk(e.data, func(p string, info os.FileInfo, err error) error {
		if err == nil && info.Mode().IsRegular() && !strings.Contains(p, "objects") {
			b, _ := os.ReadFile(p)
			haystack.Write(b)
		}
		return nil
	})
	haystack.Write(e.logs.Bytes())
	ev, _ := e.st.ListEvents(t.Context(), store.EventFilter{})
	for _, x := range ev {
		haystack.WriteString(x.Detail)
	}
	if bytes.Contains(haystack.Bytes(), []byte(secret)) {
		t.Fatal("the credential was written to the data dir, logs or events")
	}
	if haystack.Len() == 0 || !bytes.Contains(haystack.Bytes(), []byte(srv.URL)) {
		t.Fatal("haystack does not contain the clean URL; the search proves nothing")
	}
}

func TestResolveAndPristine(t *testing.T) {
	src := testutil.NewRepo(t, map[string]string{"a.txt": "one\n"})
	e := newEnv(t)
	r, _, err := e.cache.Add(t.Context(), src.Dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, ref := range []string{"", "main", "v1", src.Commits[0], src.Commits[0][:10]} {
		sha, err := e.cache.Resolve(t.Context(), r, ref)
		if err != nil || sha != src.Commits[0] {
			t.Errorf("Resolve(%q) = %q, %v; want %s", ref, sha, err, src.Commits[0])
		}
	}
	for _, ref := range []string{"nope", "--upload-pack=x", "a..b", "x\x00"} {
		if _, err := e.cache.Resolve(t.Context(), r, ref); err == nil {
			t.Errorf("Resolve(%q) succeeded", ref)
		}
	}
	// A commit pushed after the clone is found through an automatic fetch.
	second := src.Commit(t, "two", map[string]string{"b.txt": "two\n"})
	sha, err := e.cache.Resolve(t.Context(), r, "main")
	if err != nil || sha != src.Commits[0] {
		t.Fatalf("stale main = %s, %v (a known ref must not fetch)", sha, err)
	}
	sha, err = e.cache.Resolve(t.Context(), r, second)
	if err != nil || sha != second {
		t.Fatalf("Resolve(new commit) = %s, %v", sha, err)
	}

	p, err := e.cache.Pristine(t.Context(), r, second)
	if err != nil {
		t.Fatal(err)
	}
	p2, err := e.cache.Pristine(t.Context(), r, second)
	if err != nil || p2.ID != p.ID {
		t.Fatalf("second Pristine = %s, %v; want reuse of %s", p2.ID, err, p.ID)
	}
	if b, err := os.ReadFile(filepath.Join(p.Path, "b.txt")); err != nil || string(b) != "two\n" {
		t.Errorf("pristine b.txt = %q, %v", b, err)
	}
	// Standalone: no alternates, origin is the remote URL, not a host path.
	if _, err := os.Stat(filepath.Join(p.Path, ".git/objects/info/alternates")); err == nil {
		t.Error("pristine has an alternates file")
	}
	if u := testutil.Git(t, p.Path, "config", "remote.origin.url"); u != r.URL {
		t.Errorf("origin = %q, want %q", u, r.URL)
	}
	if st := testutil.Git(t, p.Path, "status", "--porcelain"); st != "" {
		t.Errorf("pristine not clean: %q", st)
	}
}
