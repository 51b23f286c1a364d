package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentbox/agentbox/client"
	"github.com/agentbox/agentbox/internal/testutil"
)

// TestWsExport: `ws diff --format patch` and `ws export --bundle` through
// the CLI and the real API; plain git applies each in a clone at the base
// and gets the workspace's files; bad input is refused naming the reason.
func TestWsExport(t *testing.T) {
	srv, cl := inProcessAPI(t)
	src := testutil.NewRepo(t, map[string]string{"README.md": "hi\n", "src/main.go": "package main\n"})
	ws, err := cl.CreateWorkspace(t.Context(), client.CreateWorkspace{Repo: src.Dir})
	if err != nil {
		t.Fatal(err)
	}
	cli := func(args ...string) (string, string, int) {
		var out, errOut bytes.Buffer
		code := run(t.Context(), append([]string{"--host", srv.URL}, args...), strings.NewReader(""), &out, &errOut)
		return out.String(), errOut.String(), code
	}
	if _, errOut, code := cli("ws", "export", ws.ID, "--bundle", filepath.Join(t.TempDir(), "b")); code == 0 || !strings.Contains(errOut, "nothing to bundle") {
		t.Errorf("export of an unchanged workspace: exit %d, %s", code, errOut)
	}
	write := func(p, content string) {
		if _, err := cl.WriteFile(t.Context(), ws.ID, p, strings.NewReader(content), 0o644, true); err != nil {
			t.Fatal(err)
		}
	}
	write("README.md", "committed\n")
	if _, _, code := cli("ws", "commit", ws.ID, "-m", "first"); code != 0 {
		t.Fatal("ws commit failed")
	}
	write("src/new.go", "package main\n\n// new\n")

	clone := func() string {
		dir := filepath.Join(t.TempDir(), "clone")
		testutil.Git(t, "", "clone", "-q", src.Dir, dir)
		return dir
	}
	check := func(dir string) {
		t.Helper()
		for p, want := range map[string]string{"README.md": "committed\n", "src/new.go": "package main\n\n// new\n"} {
			if b, err := os.ReadFile(filepath.Join(dir, p)); err != nil || string(b) != want {
				t.Errorf("%s: %q, %v", p, b, err)
			}
		}
	}

	out, errOut, code := cli("ws", "diff", ws.ID, "--format", "patch")
	if code != 0 || strings.Count(out, "\nSubject: [PATCH ") != 2 {
		t.Fatalf("ws diff --format patch: exit %d %s\n%s", code, errOut, out)
	}
	dir := clone()
	mbox := filepath.Join(t.TempDir(), "x.mbox")
	os.WriteFile(mbox, []byte(out), 0o600)
	testutil.Git(t, dir, "-c", "user.name=R", "-c", "user.email=r@example.invalid", "am", "-q", mbox)
	check(dir)

	file := filepath.Join(t.TempDir(), "result.bundle")
	out, errOut, code = cli("--json", "ws", "export", ws.ID, "--bundle", file)
	var info struct {
		Branch, Tip, File string
		Bytes             int64
	}
	if code != 0 || json.Unmarshal([]byte(out), &info) != nil || info.Branch != ws.Branch || info.File != file || info.Bytes == 0 {
		t.Fatalf("ws export --json: exit %d %s %s", code, out, errOut)
	}
	dir = clone()
	testutil.Git(t, dir, "fetch", "-q", file, info.Branch+":result")
	testutil.Git(t, dir, "checkout", "-q", "result")
	check(dir)
	if got := testutil.Git(t, dir, "rev-parse", "HEAD"); got != info.Tip {
		t.Errorf("the fetched branch is at %s, the export said %s", got, info.Tip)
	}

	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"ws", "diff", ws.ID, "--format", "mail"}, `--format "mail" is not unified or patch`},
		{[]string{"ws", "diff", ws.ID, "src", "--format", "patch"}, "no paths"},
		{[]string{"ws", "diff", ws.ID, "--check", "--format", "patch"}, "no --format"},
		{[]string{"ws", "export", ws.ID}, "--bundle FILE is required"},
		{[]string{"ws", "export", "ws_nope", "--bundle", filepath.Join(t.TempDir(), "n")}, "ws_nope not found"},
		{[]string{"ws", "export", ws.ID, "--bundle", filepath.Join(t.TempDir(), "no", "such", "dir", "b")}, "no such file or directory"},
	} {
		if _, errOut, code := cli(tt.args...); code == 0 || !strings.Contains(errOut, tt.want) {
			t.Errorf("%q: exit %d, %q; want an error with %q", tt.args, code, errOut, tt.want)
		}
	}
}
