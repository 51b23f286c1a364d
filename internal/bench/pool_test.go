package bench

import (
	"context"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/agentbox/agentbox/internal/manager"
	"github.com/agentbox/agentbox/internal/sandbox"
)

// TestPoolBenchmark runs the warm pool benchmark twice, for real, and
// checks the shape of its results and that nothing of the pool is left.
func TestPoolBenchmark(t *testing.T) {
	opts := sandboxOptions(t)
	opts.Backends = []string{BackendDocker}
	opts.warmPool = []manager.PoolSpec{{Backend: BackendDocker, Image: opts.Image, Size: poolSize}}
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
	res, err := e.poolBench(ctx)
	if err != nil {
		t.Fatal(err)
	}
	checkRows(t, res, 2, []string{"docker/" + CasePoolClaim, "docker/" + CasePoolAPI, "docker/" + CasePoolCold, "docker/" + CasePoolExec})
	checkChecks(t, res, "docker: claim → first exec median", "docker: claim → first exec median (API)", "docker: warm / cold",
		"docker: warm / exec in a running sandbox")
	if st := e.m.PoolStatus(); len(st) != 1 || st[0].Hits != 4 || st[0].Misses != 0 {
		t.Errorf("pool status %+v, want 4 hits", st)
	}
	owner := e.m.PoolOwner()
	sbs := made(t, e)
	runID, root := e.runID, e.root
	closed = true
	if err := e.close(); err != nil {
		t.Fatalf("close: %v", err)
	}
	checkGone(t, runID, root, sbs)
	out, err := exec.Command("docker", "ps", "-aq", "--filter", "label="+sandbox.LabelPoolOwner+"="+owner).Output()
	if err != nil || strings.TrimSpace(string(out)) != "" {
		t.Errorf("pooled containers left: %q (%v)", out, err)
	}
}

func TestPoolBenchmarkOnlyDocker(t *testing.T) {
	_, err := Pool(context.Background(), SandboxOptions{Backends: []string{BackendLocal}, GuestBinary: os.Args[0]}, nil)
	if err == nil || !strings.Contains(err.Error(), "only the docker backend") {
		t.Fatalf("Pool on local = %v, want a refusal", err)
	}
}
