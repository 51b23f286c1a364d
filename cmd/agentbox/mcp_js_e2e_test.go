package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/agentbox/agentbox/internal/sandbox/backendtest"
	"github.com/agentbox/agentbox/internal/testutil"
)

// nodeSDK installs the pinned TypeScript MCP SDK (testdata/mcp's package
// and lock files) into the npm cache outside the clone, once per lock file
// (testutil.NPMTools), and returns its node_modules directory. Without
// node and npm, or the registry, it skips, and fails under
// AGENTBOX_REQUIRE_SETUP=1.
func nodeSDK(t *testing.T) string {
	t.Helper()
	dir, err := testutil.NPMTools(t.Context(), filepath.Join("testdata", "mcp"))
	if err != nil {
		backendtest.SkipOrFail(t, "installing the pinned @modelcontextprotocol/sdk: "+err.Error())
	}
	return filepath.Join(dir, "node_modules")
}

// TestMCPTypeScriptSDK runs an agent's session with the official
// TypeScript MCP SDK (testdata/mcp/client.mjs) against a real daemon
// listening on TCP with a bearer token: over stdio through `agentbox mcp`,
// and over streamable HTTP at /mcp (refused without the token). The
// client validates every tool's schemas with Ajv and each structured
// result against its tool's output schema.
func TestMCPTypeScriptSDK(t *testing.T) {
	requireDebianEngine(t)
	modules := nodeSDK(t)
	// The script resolves its imports from the node_modules next to it.
	work := t.TempDir()
	script, err := os.ReadFile(filepath.Join("testdata", "mcp", "client.mjs"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(work, "client.mjs"), script, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(modules, filepath.Join(work, "node_modules")); err != nil {
		t.Fatal(err)
	}

	data := t.TempDir()
	cleanupAll(t, data)
	const token = "mcp-ts-token-0123456789abcdef"
	addr := startTCPDaemon(t, data, token)
	src := testutil.NewRepo(t, calcRepo)
	for _, mode := range []string{"stdio", "http"} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			// A hung call fails this test, not the whole package's run.
			ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
			defer cancel()
			cmd := exec.CommandContext(ctx, "node", filepath.Join(work, "client.mjs"), mode)
			cmd.Env = append(os.Environ(), "AGENTBOX_BIN="+binary, "AGENTBOX_HOST="+addr, "AGENTBOX_URL="+strings.Replace(addr, "tcp://", "http://", 1),
				"AGENTBOX_TOKEN="+token, "REPO="+src.Dir)
			var stdout, stderr bytes.Buffer
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			if err := cmd.Run(); err != nil {
				t.Fatalf("node client.mjs %s: %v\n%s%s", mode, err, stdout.String(), stderr.String())
			}
			lines := strings.Split(strings.TrimSpace(stdout.String()), "\n")
			var sum struct {
				Transport     string
				Tools, Checks int
			}
			if err := json.Unmarshal([]byte(lines[len(lines)-1]), &sum); err != nil || sum.Transport != mode || sum.Tools < 15 || sum.Checks < 100 {
				t.Errorf("node client.mjs %s: summary %+v (%v)\n%s", mode, sum, err, stdout.String())
			}
			t.Logf("%s: %d tools, %d checks passed", mode, sum.Tools, sum.Checks)
			if stderr.Len() > 0 {
				t.Logf("%s: node's stderr:\n%s", mode, stderr.String())
			}
		})
	}
}

// startTCPDaemon runs `agentbox serve` on a free loopback port with a
// bearer token and returns its address (tcp://HOST:PORT).
func startTCPDaemon(t *testing.T, data, token string) string {
	t.Helper()
	cmd := exec.Command(binary, "serve", "--data", data, "--listen", "tcp://127.0.0.1:0")
	cmd.Env = append(os.Environ(), "AGENTBOX_TOKEN="+token)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGTERM)
		cmd.Wait()
	})
	// The daemon logs its address once it serves.
	dec := json.NewDecoder(stderr)
	for {
		var line map[string]any
		if err := dec.Decode(&line); err != nil {
			t.Fatalf("daemon log ended before it served: %v", err)
		}
		if a, ok := line["addr"].(string); ok && line["msg"] == "agentbox serving" {
			go io.Copy(io.Discard, io.MultiReader(dec.Buffered(), stderr))
			return a
		}
	}
}
