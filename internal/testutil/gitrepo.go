// Package testutil builds real git repositories and servers for tests.
package testutil

import (
	"fmt"
	"net/http"
	"net/http/cgi"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// Git runs git in dir with a fixed identity and fails the test on error.
func Git(t testing.TB, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(),
		"GIT_AUTHOR_NAME=Test", "GIT_AUTHOR_EMAIL=test@example.invalid",
		"GIT_COMMITTER_NAME=Test", "GIT_COMMITTER_EMAIL=test@example.invalid",
		"GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL=/dev/null")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("git %s in %s: %v\n%s", strings.Join(args, " "), dir, err, out)
	}
	return strings.TrimSpace(string(out))
}

// Repo is a source repository made for a test.
type Repo struct {
	// Dir is the non-bare repository with a work tree.
	Dir string
	// Commits are the commit names in order (first is the root).
	Commits []string
}

// NewRepo creates a repository on branch main with files (path -> content)
// in one commit, and a tag v1 on it.
func NewRepo(t testing.TB, files map[string]string) *Repo {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "src")
	Git(t, "", "init", "-q", "-b", "main", dir)
	r := &Repo{Dir: dir}
	r.Commit(t, "initial", files)
	Git(t, dir, "tag", "v1")
	return r
}

// Commit writes files (empty content deletes) and commits them.
func (r *Repo) Commit(t testing.TB, msg string, files map[string]string) string {
	t.Helper()
	for p, content := range files {
		full := filepath.Join(r.Dir, p)
		if content == "" {
			os.Remove(full)
			continue
		}
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	Git(t, r.Dir, "add", "-A")
	Git(t, r.Dir, "commit", "-q", "--allow-empty", "-m", msg)
	sha := Git(t, r.Dir, "rev-parse", "HEAD")
	r.Commits = append(r.Commits, sha)
	return sha
}

// ManyFiles returns n small files spread over directories, for size tests.
func ManyFiles(n int) map[string]string {
	files := make(map[string]string, n)
	for i := range n {
		files[fmt.Sprintf("pkg%03d/sub%02d/file%05d.txt", i/200, (i/20)%10, i)] = fmt.Sprintf("line one of %d\nline two\n", i)
	}
	return files
}

// HTTPServer serves the bare repositories under root over git's smart HTTP
// protocol (git http-backend through CGI) on loopback, requiring basic auth
// user:pass when user is not empty.
type HTTPServer struct {
	*httptest.Server
}

// NewHTTPServer starts the server; it is closed when the test ends.
func NewHTTPServer(t testing.TB, root, user, pass string) *HTTPServer {
	t.Helper()
	backend, err := exec.Command("git", "--exec-path").Output()
	if err != nil {
		t.Fatal(err)
	}
	h := &cgi.Handler{
		Path: filepath.Join(strings.TrimSpace(string(backend)), "git-http-backend"),
		Env:  []string{"GIT_PROJECT_ROOT=" + root, "GIT_HTTP_EXPORT_ALL=1", "GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL=/dev/null"},
	}
	s := &HTTPServer{}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if user != "" {
			u, p, ok := r.BasicAuth()
			if !ok || u != user || p != pass {
				w.Header().Set("WWW-Authenticate", `Basic realm="test"`)
				http.Error(w, "unauthorized", http.StatusUnauthorized)
				return
			}
		}
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(s.Close)
	return s
}
