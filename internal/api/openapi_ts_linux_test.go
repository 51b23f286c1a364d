package api_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentbox/agentbox/client"
	"github.com/agentbox/agentbox/internal/sandbox/backendtest"
	"github.com/agentbox/agentbox/internal/testutil"
)

// TestOpenAPIToolsAndTypeScriptClient holds the served /v1/openapi.json to
// the tools other languages use: a pinned linter (@redocly/cli, its
// recommended rules) must find no error, and a TypeScript client generated
// from it (openapi-typescript) must type-check (tsc, strict) and run a
// buffered exec, a file write and a ranged read against the daemon, every
// exchange held to the document. The npm packages (testdata/tsclient, a
// lock file pins every one) are installed once into
// testutil.NPMCacheDir(), outside the clone.
func TestOpenAPIToolsAndTypeScriptClient(t *testing.T) {
	tools, err := testutil.NPMTools(t.Context(), "testdata/tsclient")
	if err != nil {
		backendtest.SkipOrFail(t, "installing the OpenAPI tools: "+err.Error())
	}
	bin := func(name string) string { return filepath.Join(tools, "node_modules", ".bin", name) }
	run := func(dir string, env []string, name string, args ...string) string {
		t.Helper()
		cmd := exec.CommandContext(t.Context(), name, args...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "REDOCLY_TELEMETRY=off", "REDOCLY_SUPPRESS_UPDATE_NOTICE=true", "NO_COLOR=1")
		cmd.Env = append(cmd.Env, env...)
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		if err := cmd.Run(); err != nil {
			t.Fatalf("%s %s: %v\n%s\n%s", filepath.Base(name), strings.Join(args, " "), err, stdout.String(), stderr.String())
		}
		return stdout.String()
	}

	check := newDocCheck(t)
	f := newSandboxFixture(t, check.wrap)
	work := t.TempDir()
	resp, err := http.Get(f.srv.URL + "/v1/openapi.json")
	if err != nil {
		t.Fatal(err)
	}
	doc, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err := os.WriteFile(filepath.Join(work, "openapi.json"), doc, 0o644); err != nil {
		t.Fatal(err)
	}

	// The linter: no error.
	var lint struct {
		Totals   struct{ Errors, Warnings int }
		Problems []struct {
			RuleID, Severity, Message string
		}
	}
	if err := json.Unmarshal([]byte(run(work, nil, bin("redocly"), "lint", "openapi.json", "--format=json")), &lint); err != nil {
		t.Fatalf("redocly lint output: %v", err)
	}
	for _, p := range lint.Problems {
		if p.Severity == "error" {
			t.Errorf("redocly lint: %s: %s", p.RuleID, p.Message)
		} else {
			t.Logf("redocly lint %s: %s: %s", p.Severity, p.RuleID, p.Message)
		}
	}
	t.Logf("redocly lint: %d errors, %d warnings", lint.Totals.Errors, lint.Totals.Warnings)
	if lint.Totals.Errors != 0 {
		t.Fatalf("redocly lint found %d errors", lint.Totals.Errors)
	}

	// The generated client type-checks, and runs.
	run(work, nil, bin("openapi-typescript"), "openapi.json", "-o", "api.d.ts")
	for _, name := range []string{"client.ts", "main.ts", "tsconfig.json"} {
		b, err := os.ReadFile(filepath.Join("testdata/tsclient", name))
		if err != nil {
			t.Fatal(err)
		}
		os.WriteFile(filepath.Join(work, name), b, 0o644)
	}
	run(work, nil, bin("tsc"), "-p", ".")
	out := run(work, []string{"AGENTBOX_URL=" + f.srv.URL, "AGENTBOX_WS=" + f.ws.ID}, "node", "out/main.js")
	if !strings.Contains(out, "typescript client: ok") {
		t.Errorf("node out/main.js: %s", out)
	}

	// The streams the document types, as the daemon sends them: NDJSON
	// (the Go client) and SSE.
	if _, err := f.cl.Exec(t.Context(), f.ws.ID, client.Exec{Sh: "echo a; printf '\\377' >&2"}, io.Discard, io.Discard); err != nil {
		t.Fatal(err)
	}
	req, _ := http.NewRequestWithContext(t.Context(), "POST", f.srv.URL+"/v1/workspaces/"+f.ws.ID+"/exec", strings.NewReader(`{"argv":["echo","sse"]}`))
	req.Header.Set("Accept", "text/event-stream")
	if resp, err := http.DefaultClient.Do(req); err != nil {
		t.Fatal(err)
	} else {
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	if _, err := f.cl.Exec(t.Context(), "ws_nope", client.Exec{Argv: []string{"true"}}, nil, nil); !errors.Is(err, client.ErrNotFound) {
		t.Errorf("exec in an unknown workspace: %v", err)
	}
	seen := strings.Join(check.covered(), "\n")
	for _, want := range []string{"execWorkspace 200 application/json", "execWorkspace 200 application/x-ndjson", "execWorkspace 200 text/event-stream", "writeFile 200 application/json", "execWorkspace 404 application/json"} {
		if !strings.Contains(seen, want) {
			t.Errorf("no exchange checked for %q; checked:\n%s", want, seen)
		}
	}
}
