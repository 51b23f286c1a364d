package bench

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"

	"github.com/agentbox/agentbox/internal/sandbox/backendtest"
	"github.com/agentbox/agentbox/internal/testutil"
)

// TestE2BBenchmark runs the E2B benchmark twice on docker, for real (the
// official SDK in Node against the E2B endpoint, and /v1), and checks the
// shape of its results and that it leaves nothing behind. It never looks
// at how long anything took.
func TestE2BBenchmark(t *testing.T) {
	opts := sandboxOptions(t)
	opts.Backends = []string{BackendDocker}
	opts.Image = DefaultE2BImage
	if _, err := exec.LookPath("node"); err != nil {
		backendtest.SkipOrFail(t, "no node: "+err.Error())
	}
	opts.E2BSDK = filepath.Join(testutil.NPMCacheDir(), "bench-e2b-"+E2BSDKVersion)
	ctx := context.Background()
	if err := ensureE2BSDK(ctx, opts.E2BSDK, testLog{t}); err != nil {
		backendtest.SkipOrFail(t, err.Error())
	}
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
	res, err := e.e2bBench(ctx)
	if err != nil {
		t.Fatal(err)
	}
	checkRows(t, res, 2, []string{"docker/" + CaseE2BCreate, "docker/" + CaseE2BCreateV1, "docker/" + CaseE2BRun, "docker/" + CaseE2BRunV1, "docker/" + CaseE2BRunV1Bash, "docker/" + CaseE2BRunV1Buffed, "docker/" + CaseE2BList})
	for _, name := range []string{"docker: create → first run, E2B SDK / /v1", "docker: run('true') round trip, E2B SDK / /v1 streamed"} {
		if !slices.ContainsFunc(res.Checks, func(c Check) bool { return c.Name == name && c.Ratio > 0 }) {
			t.Errorf("no ratio %q in %+v", name, res.Checks)
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
