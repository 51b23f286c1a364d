package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentbox/agentbox/internal/testutil"
)

// TestNoEngineFallsBackToLocal: a daemon whose container engine does not
// answer serves sandboxes from the local backend by default, and a
// sandbox that asks for docker is refused with the reason, creating
// nothing.
func TestNoEngineFallsBackToLocal(t *testing.T) {
	data := t.TempDir()
	cfg := filepath.Join(data, "config.yaml")
	noEngine := "unix://" + filepath.Join(data, "no-engine.sock")
	if err := os.WriteFile(cfg, []byte("docker_host: "+noEngine+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("AGENTBOX_CONFIG", cfg)
	// Without an engine, the local backend's root is all an image is.
	if out, errOut, code := runCLI(t, data, "", "--json", "image", "build", "--kind", "busybox", "--no-engine"); code != 0 {
		t.Fatalf("image build --no-engine: %s %s", out, errOut)
	}
	src := testutil.NewRepo(t, map[string]string{"hello.txt": "hello\n"})
	d := startDaemon(t, data)
	defer d.stop(t)
	cleanupAll(t, data)
	out, errOut, code := runCLI(t, data, "", "--json", "ws", "create", "--repo", src.Dir)
	if code != 0 {
		t.Fatalf("ws create: %s %s", out, errOut)
	}
	ws := oneJSON(t, out)["id"].(string)

	out, errOut, code = runCLI(t, data, "", "--json", "sandbox", "create", "--ws", ws, "--backend", "docker")
	// Refused with the reason: the engine at that address does not answer.
	if code == 0 || !strings.Contains(out, `"code":"unavailable"`) || !strings.Contains(out, `backend \"docker\" is unavailable on this daemon`) ||
		!strings.Contains(out, noEngine) {
		t.Errorf("sandbox create --backend docker without an engine: exit %d %s %s", code, out, errOut)
	}
	if out, _, _ := runCLI(t, data, "", "--json", "sandbox", "ls", "--ws", ws); !strings.Contains(out, `"sandboxes":[]`) && !strings.Contains(out, `"sandboxes": []`) {
		t.Errorf("a refused create left a sandbox: %s", out)
	}

	out, errOut, code = runCLI(t, data, "", "--json", "sandbox", "create", "--ws", ws, "--image", "agentbox/busybox:latest")
	if code != 0 {
		t.Fatalf("sandbox create with the default backend: %s %s", out, errOut)
	}
	if sb := oneJSON(t, out); sb["backend"] != "local" || sb["state"] != "running" {
		t.Errorf("default backend without an engine: %v", sb)
	}
	out, errOut, code = runCLI(t, data, "", "exec", ws, "--", "cat", "hello.txt")
	if code != 0 || out != "hello\n" {
		t.Errorf("exec on the local default: exit %d %q %q", code, out, errOut)
	}
}
