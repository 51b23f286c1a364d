package bench

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"
)

// TestMCPBenchmark runs the MCP benchmark twice on docker, for real (an
// `agentbox mcp` child process and the API's /mcp), and checks the shape
// of its results. It never looks at how long anything took.
func TestMCPBenchmark(t *testing.T) {
	opts := sandboxOptions(t)
	opts.Backends = []string{BackendDocker}
	opts.Binary = filepath.Join(t.TempDir(), "agentbox")
	if out, err := exec.Command("go", "build", "-o", opts.Binary, "github.com/agentbox/agentbox/cmd/agentbox").CombinedOutput(); err != nil {
		t.Fatalf("building agentbox: %v\n%s", err, out)
	}
	ctx := context.Background()
	tmp, err := os.MkdirTemp("/tmp", "abt-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Remove(tmp) })
	t.Setenv("TMPDIR", tmp)
	e, err := newEnv(ctx, opts, testLog{t}, nil)
	if err != nil {
		t.Fatal(err)
	}
	e.noWarmup = true
	closed := false
	t.Cleanup(func() {
		if !closed {
			e.close()
		}
	})
	res, err := e.mcpBench(ctx)
	if err != nil {
		t.Fatal(err)
	}
	checkRows(t, res, 2, []string{"docker/" + CaseMCPAPI, "docker/" + CaseMCPAPIStream, "docker/" + CaseMCPHTTP, "docker/" + CaseMCPStdio})
	for _, name := range []string{"docker: MCP over streamable HTTP adds to /v1 (median - median)", "docker: MCP over stdio adds to /v1 (median - median)"} {
		if !slices.ContainsFunc(res.Checks, func(c Check) bool { return c.Name == name && c.Target == "<= 1.00 ms" }) {
			t.Errorf("no check %q in %+v", name, res.Checks)
		}
	}
	sbs := made(t, e)
	runID, root := e.runID, e.root
	closed = true
	if err := e.close(); err != nil {
		t.Fatalf("close: %v", err)
	}
	checkGone(t, runID, root, sbs)
}
