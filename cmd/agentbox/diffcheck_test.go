package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/agentbox/agentbox/client"
	"github.com/agentbox/agentbox/internal/api"
	"github.com/agentbox/agentbox/internal/manager"
	"github.com/agentbox/agentbox/internal/store/sqlstore"
	"github.com/agentbox/agentbox/internal/testutil"
	"github.com/agentbox/agentbox/internal/testutil/skip"
)

// inProcessAPI serves the real API of a real manager (git, SQLite,
// workspaces; no sandbox backend) over HTTP, in process.
func inProcessAPI(t *testing.T) (*httptest.Server, *client.Client) {
	t.Helper()
	if _, err := exec.LookPath("git"); err != nil || os.Geteuid() != 0 {
		skip.OrFail(t, "this needs git and root (workspace files are chowned)")
	}
	t.Setenv("AGENTBOX_TOKEN", "")
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
	srv := httptest.NewServer(api.New(m, api.Options{}))
	t.Cleanup(srv.Close)
	t.Cleanup(func() {
		ctx := context.Background() // t.Context is cancelled by now
		wss, _ := m.ListWorkspaces(ctx, manager.ListFilter{})
		for _, w := range wss {
			if err := m.RemoveWorkspace(ctx, w.ID); err != nil {
				t.Errorf("cleanup: %v", err)
			}
		}
	})
	cl, err := client.New(srv.URL, "")
	if err != nil {
		t.Fatal(err)
	}
	return srv, cl
}

// TestWsDiffCheck runs `agentbox ws diff --check` in process against the
// real API over HTTP (manager, git and all), and the endpoint itself with
// raw requests. No sandbox is started.
func TestWsDiffCheck(t *testing.T) {
	srv, cl := inProcessAPI(t)
	src := testutil.NewRepo(t, map[string]string{"README.md": "hi\n", "src/main.go": "package main\n"})
	ws, err := cl.CreateWorkspace(t.Context(), client.CreateWorkspace{Repo: src.Dir})
	if err != nil {
		t.Fatal(err)
	}
	clean, err := cl.CreateWorkspace(t.Context(), client.CreateWorkspace{Repo: src.Dir})
	if err != nil {
		t.Fatal(err)
	}
	// Assembled so that this file holds nothing a scanner takes for a
	// real token.
	ghp := "ghp_" + strings.Repeat("a1B2", 9)
	for p, content := range map[string]string{
		"src/ok.go":         "package main\n",
		"notes/outside.txt": "outside\n",
		"src/token.go":      "package main\n\nconst token = \"" + ghp + "\"\n",
	} {
		if _, err := cl.WriteFile(t.Context(), ws.ID, p, strings.NewReader(content), 0o644, true); err != nil {
			t.Fatal(err)
		}
	}
	dir := t.TempDir()
	srcOnly := filepath.Join(dir, "src-only.yaml")
	bad := filepath.Join(dir, "bad.yaml")
	for p, content := range map[string]string{srcOnly: "writable_paths: [\"src/**\"]\n", bad: "writable_paths: [\"src/**\"]\nbogus: 1\n"} {
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}

	secretLine := "src/token.go:3:16: github-token ghp_…(40 bytes)\n"
	tests := []struct {
		name      string
		args      []string
		stdin     string
		code      int
		stdout    string // exact, unless stdoutHas
		stdoutHas string
		stderrHas string
	}{
		{name: "diff without --check is unchanged", args: []string{"ws", "diff", ws.ID}, stdoutHas: "+const token = \"" + ghp},
		{name: "policy file", args: []string{"ws", "diff", ws.ID, "--check", "--policy", srcOnly}, code: 1,
			stdout:    "notes/outside.txt: added outside the writable paths\n" + secretLine,
			stderrHas: ws.ID + ": 1 path(s) outside the writable paths, 1 possible secret(s)"},
		{name: "policy on stdin", args: []string{"ws", "diff", ws.ID, "--check", "--policy", "-"}, stdin: `{"writable_paths": ["**/*.txt"]}`, code: 1,
			stdout: "src/ok.go: added outside the writable paths\nsrc/token.go: added outside the writable paths\n" + secretLine},
		{name: "no policy, no sandbox: all writable", args: []string{"ws", "diff", ws.ID, "--check"}, code: 1, stdout: secretLine},
		{name: "clean", args: []string{"ws", "diff", clean.ID, "--check", "--policy", srcOnly},
			stdout: clean.ID + ": no changed path outside the writable paths, no secret in the added lines\n"},
		{name: "bad policy", args: []string{"ws", "diff", ws.ID, "--check", "--policy", bad}, code: 1, stderrHas: "bogus"},
		{name: "policy without check", args: []string{"ws", "diff", ws.ID, "--policy", srcOnly}, code: 1, stderrHas: "--policy is only used with --check"},
		{name: "paths with check", args: []string{"ws", "diff", ws.ID, "src", "--check"}, code: 1, stderrHas: "no paths"},
		{name: "unknown workspace", args: []string{"ws", "diff", "ws_nope", "--check"}, code: 1, stderrHas: "ws_nope not found"},
		// ws commit checks what it commits: refused, naming the finding,
		// then made with --force, which says so.
		{name: "commit refused", args: []string{"ws", "commit", ws.ID, "-m", "leak"}, code: 1,
			stderrHas: "the commit is refused: its diff fails the check: src/token.go:3:16: github-token ghp_…(40 bytes); --force commits it anyway"},
		{name: "commit forced", args: []string{"ws", "commit", ws.ID, "-m", "leak", "--force"}, stdoutHas: "leak\n",
			stderrHas: "committed with --force despite the check: src/token.go:3:16: github-token ghp_…(40 bytes)"},
		{name: "commit clean", args: []string{"ws", "commit", clean.ID, "-m", "nothing"}, code: 1, stderrHas: "nothing to commit"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var out, errOut bytes.Buffer
			code := run(t.Context(), append([]string{"--host", srv.URL}, tt.args...), strings.NewReader(tt.stdin), &out, &errOut)
			if code != tt.code {
				t.Errorf("exit %d, want %d; stdout %q stderr %q", code, tt.code, out.String(), errOut.String())
			}
			if tt.stdoutHas != "" {
				if !strings.Contains(out.String(), tt.stdoutHas) {
					t.Errorf("stdout does not hold %q:\n%s", tt.stdoutHas, out.String())
				}
			} else if diff := cmp.Diff(tt.stdout, out.String()); diff != "" {
				t.Errorf("stdout (-want +got):\n%s", diff)
			}
			if !strings.Contains(errOut.String(), tt.stderrHas) {
				t.Errorf("stderr %q does not hold %q", errOut.String(), tt.stderrHas)
			}
		})
	}

	t.Run("json", func(t *testing.T) {
		var out, errOut bytes.Buffer
		code := run(t.Context(), []string{"--host", srv.URL, "--json", "ws", "diff", ws.ID, "--check", "--policy", srcOnly}, strings.NewReader(""), &out, &errOut)
		if code != 1 || errOut.Len() != 0 {
			t.Errorf("exit %d stderr %q; want 1 and nothing", code, errOut.String())
		}
		if strings.Contains(out.String(), ghp) {
			t.Errorf("the JSON report holds the token:\n%s", out.String())
		}
		var got client.DiffReport
		dec := json.NewDecoder(&out)
		if err := dec.Decode(&got); err != nil || dec.More() {
			t.Fatalf("not one JSON document (%v):\n%s", err, out.String())
		}
		want := client.DiffReport{ID: ws.ID, OK: false,
			OutsideWritable: []client.DiffPathFinding{{Path: "notes/outside.txt", Status: "A"}},
			Secrets:         []client.DiffSecretFinding{{Path: "src/token.go", Line: 3, Column: 16, Kind: "github-token", Excerpt: "ghp_…(40 bytes)"}},
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("report (-want +got):\n%s", diff)
		}
	})

	t.Run("endpoint", func(t *testing.T) {
		url := srv.URL + "/v1/workspaces/" + ws.ID + "/diff/check"
		for _, tc := range []struct {
			name, body string
			status     int
			has        string
		}{
			{"no body", "", 200, `"ok":false`},
			{"empty object", `{}`, 200, `"secrets":[{"path":"src/token.go"`},
			{"null policy", `{"policy":null}`, 200, `"outside_writable":[]`},
			{"policy", `{"policy":{"writable_paths":["src/**"]}}`, 200, `"outside_writable":[{"path":"notes/outside.txt","status":"A"}]`},
			{"policy read strictly", `{"policy":{"writable_paths":["src/**"],"bogus":1}}`, 400, "bogus"},
			{"bad glob", `{"policy":{"writable_paths":["/abs/**"]}}`, 400, "writable_paths[0]"},
			{"unknown field", `{"polcy":{}}`, 400, "polcy"},
		} {
			t.Run(tc.name, func(t *testing.T) {
				resp, err := http.Post(url, "application/json", strings.NewReader(tc.body))
				if err != nil {
					t.Fatal(err)
				}
				defer resp.Body.Close()
				var b bytes.Buffer
				b.ReadFrom(resp.Body)
				if resp.StatusCode != tc.status || !strings.Contains(b.String(), tc.has) {
					t.Errorf("POST %s: %d %s; want %d holding %s", tc.body, resp.StatusCode, b.String(), tc.status, tc.has)
				}
				if strings.Contains(b.String(), ghp) {
					t.Errorf("the reply holds the token: %s", b.String())
				}
			})
		}
	})
}
