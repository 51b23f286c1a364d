package api_test

import (
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentbox/agentbox/client"
	"github.com/agentbox/agentbox/internal/testutil"
)

// TestTraversalThroughHTTP sends SECURITY.md 15 strings as raw query
// strings (so that percent-encoding reaches the server as a client could
// send it) to every file verb, and checks that nothing outside the
// workspace is read, listed or changed.
func TestTraversalThroughHTTP(t *testing.T) {
	f := newFixture(t, "")
	src := testutil.NewRepo(t, map[string]string{"a.txt": "a\n"})
	ws, err := f.cl.CreateWorkspace(t.Context(), client.CreateWorkspace{Repo: src.Dir})
	if err != nil {
		t.Fatal(err)
	}
	// A canary next to the workspace directory, and one in a sibling whose
	// name shares the workspace's prefix.
	parent := filepath.Dir(ws.Path)
	canary := filepath.Join(parent, "canary.txt")
	sibling := ws.Path + "-evil"
	os.WriteFile(canary, []byte("host-secret-canary"), 0o600)
	os.MkdirAll(sibling, 0o700)
	os.WriteFile(filepath.Join(sibling, "x"), []byte("host-secret-canary"), 0o600)
	before := listing(t, parent)

	encoded := []string{
		"..%2fcanary.txt", "%2e%2e%2fcanary.txt", "%2e%2e/canary.txt", "%252e%252e%252fcanary.txt",
		"..%5ccanary.txt", "%2fetc%2fpasswd", "/etc/passwd", "a.txt%00.png", "..%2f..%2f..%2f..%2fetc%2fpasswd",
		"..%2fmerged-evil%2fx", "..%2f" + filepath.Base(sibling) + "%2fx", "", "%2e", "./../canary.txt",
		strings.Repeat("a", 300), strings.Repeat("a/", 2100),
	}
	base := f.srv.URL + "/v1/workspaces/" + ws.ID + "/files"
	for _, p := range encoded {
		for _, rq := range []struct{ method, url, body string }{
			{"GET", base + "?path=" + p, ""},
			{"PUT", base + "?parents=true&path=" + p, "pwned"},
			{"DELETE", base + "?recursive=true&path=" + p, ""},
			{"GET", base + "/stat?path=" + p, ""},
			{"GET", base + "/list?path=" + p, ""},
		} {
			req, _ := http.NewRequestWithContext(t.Context(), rq.method, rq.url, strings.NewReader(rq.body))
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if strings.Contains(string(body), "host-secret-canary") || strings.Contains(string(body), "root:x:0:0") {
				t.Fatalf("%s %s leaked host content: %s", rq.method, rq.url, body)
			}
		}
	}
	// JSON-bodied verbs with the decoded forms.
	for _, p := range []string{"../canary.txt", "/etc/passwd", "..\\canary.txt", "a\x00b", "../" + filepath.Base(sibling) + "/x"} {
		if _, err := f.cl.Mkdir(t.Context(), ws.ID, p+"/d", true); err == nil {
			t.Errorf("mkdir %q succeeded", p)
		}
		if err := f.cl.Rename(t.Context(), ws.ID, "a.txt", p); err == nil {
			t.Errorf("rename to %q succeeded", p)
		}
		if err := f.cl.Rename(t.Context(), ws.ID, p, "stolen"); err == nil {
			t.Errorf("rename from %q succeeded", p)
		}
		if res, err := f.cl.Grep(t.Context(), ws.ID, client.GrepRequest{Pattern: "canary", Path: p}); err == nil && len(res.Matches) > 0 {
			t.Errorf("grep %q found %v", p, res.Matches)
		}
	}
	if b, _ := os.ReadFile(canary); string(b) != "host-secret-canary" {
		t.Fatal("canary changed")
	}
	if d := listing(t, parent); d != before {
		t.Fatalf("directory next to the workspace changed:\nbefore %s\nafter  %s", before, d)
	}
	if b, _ := os.ReadFile(filepath.Join(sibling, "x")); string(b) != "host-secret-canary" {
		t.Fatal("sibling canary changed")
	}
}

func listing(t *testing.T, dir string) string {
	var names []string
	filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		if d.IsDir() && d.Name() == "merged" {
			return filepath.SkipDir // the workspace itself may change
		}
		names = append(names, p)
		return nil
	})
	return strings.Join(names, "\n")
}
