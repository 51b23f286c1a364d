package workspace

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/agentbox/agentbox/internal/errdefs"
	"github.com/agentbox/agentbox/internal/testutil"
)

// TestPush: a new branch, then a fast-forward, then a push the remote
// must refuse (agentbox never forces); over HTTP the token goes in a
// header git gets from its environment and never shows in an error.
func TestPush(t *testing.T) {
	ctx := t.Context()
	g, fx := hostGit(t)
	author := Author{Name: "A", Email: "a@example.invalid"}
	remote := filepath.Join(t.TempDir(), "remote.git")
	testutil.Git(t, "", "clone", "-q", "--bare", fx.src.Dir, remote)

	mustWrite(t, filepath.Join(g.Files, "one.txt"), "1\n")
	first, err := g.Commit(ctx, "one", author, testUID, testGID, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := g.Push(ctx, remote, first, "agentbox/t/ws", nil); err != nil {
		t.Fatal(err)
	}
	if got := testutil.Git(t, remote, "rev-parse", "refs/heads/agentbox/t/ws"); got != first {
		t.Errorf("remote branch at %s, want %s", got, first)
	}
	mustWrite(t, filepath.Join(g.Files, "two.txt"), "2\n")
	second, err := g.Commit(ctx, "two", author, testUID, testGID, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := g.Push(ctx, remote, second, "agentbox/t/ws", nil); err != nil {
		t.Fatalf("fast-forward: %v", err)
	}
	// The remote moves on without us: pushing the older commit is not a
	// fast-forward and must not win.
	if err := g.Push(ctx, remote, first, "agentbox/t/ws", nil); !errors.Is(err, errdefs.ErrConflict) {
		t.Errorf("a non-fast-forward push = %v, want ErrConflict", err)
	}
	if got := testutil.Git(t, remote, "rev-parse", "refs/heads/agentbox/t/ws"); got != second {
		t.Errorf("after a refused push the remote branch is at %s, want %s", got, second)
	}
	for _, bad := range []struct{ remote, branch string }{
		{"git@example.invalid:o/r.git", "b"},
		{"https://user:pw@example.invalid/o/r.git", "b"},
		{"relative/path", "b"},
		{"ext::sh -c touch% /tmp/pwned", "b"},
		{remote, "-b"},
		{remote, "a..b"},
	} {
		if err := g.Push(ctx, bad.remote, second, bad.branch, nil); err == nil {
			t.Errorf("push to %q %q succeeded", bad.remote, bad.branch)
		}
	}

	// HTTP: the header carries the token; a refusal names no token.
	const token = "tok_0123456789abcdef"
	var mu sync.Mutex
	var auths []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		auths = append(auths, r.Header.Get("Authorization"))
		mu.Unlock()
		http.Error(w, "denied", http.StatusForbidden)
	}))
	defer srv.Close()
	err = g.Push(ctx, srv.URL+"/o/r.git", second, "agentbox/t/ws", &PushAuth{User: "bot", Token: token})
	if err == nil || strings.Contains(err.Error(), token) {
		t.Fatalf("push to a refusing server: %v", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(auths) == 0 || auths[0] != "Basic Ym90OnRva18wMTIzNDU2Nzg5YWJjZGVm" {
		t.Errorf("the server saw Authorization %q", auths)
	}
}
