package bench

import (
	"context"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/agentbox/agentbox/internal/manager"
	"github.com/agentbox/agentbox/internal/mountinfo"
	"github.com/agentbox/agentbox/internal/sandbox"
)

// TestPoolBenchmark runs the warm pool benchmark twice on docker, for
// real, and checks the shape of its results and that nothing of the pool
// is left.
func TestPoolBenchmark(t *testing.T) {
	testPoolBenchmark(t, BackendDocker, []string{CasePoolClaim, CasePoolAPI, CasePoolCold, CasePoolExec},
		"docker: claim → first exec median", "docker: claim → first exec median (API)", "docker: warm / cold",
		"docker: warm / exec in a running sandbox")
}

// TestPoolBenchmarkLocal is the same on local, with the bare bubblewrap
// run beside it and the ratio the local backend is held to.
func TestPoolBenchmarkLocal(t *testing.T) {
	testPoolBenchmark(t, BackendLocal, []string{CasePoolClaim, CasePoolAPI, CasePoolCold, CasePoolExec, CaseBwrap},
		"local: claim → first exec / bwrap", "local: claim → first exec / bwrap (API)", "local: cold / bwrap",
		"local: warm / cold", "local: warm / exec in a running sandbox")
}

func testPoolBenchmark(t *testing.T, backend string, cases []string, checks ...string) {
	opts := sandboxOptions(t)
	opts.Backends = []string{backend}
	opts.warmPool = []manager.PoolSpec{{Backend: backend, Image: opts.Image, Size: poolSize}}
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
	var rows []string
	for _, c := range cases {
		rows = append(rows, backend+"/"+c)
	}
	checkRows(t, res, 2, rows)
	checkChecks(t, res, checks...)
	if st := e.m.PoolStatus(); len(st) != 1 || st[0].Backend != backend || st[0].Hits != 4 || st[0].Misses != 0 {
		t.Errorf("pool status %+v, want 4 hits on %s", st, backend)
	}
	owner := e.m.PoolOwner()
	be := e.bes[backend]
	sbs := made(t, e)
	runID, root := e.runID, e.root
	// The pooled environments the pool holds now, which no sandbox
	// creation names: close must remove them too.
	pooled, err := be.List(ctx, map[string]string{sandbox.LabelPool: "1", sandbox.LabelPoolOwner: owner})
	if err != nil || len(pooled) != poolSize {
		t.Errorf("pooled environments before close: %+v, %v; want %d", pooled, err, poolSize)
	}
	for _, in := range pooled {
		sbs[in.ID] = backend + " " + in.Ref
	}
	closed = true
	if err := e.close(); err != nil {
		t.Fatalf("close: %v", err)
	}
	checkGone(t, runID, root, sbs)
	// No mount of any of them (a pool point, a workspace on one) is left.
	mps, err := mountinfo.Points()
	if err != nil {
		t.Fatal(err)
	}
	for _, mp := range mps {
		for id := range sbs {
			if strings.Contains(mp, id) || strings.HasPrefix(mp, root+"/") {
				t.Errorf("mount %s left", mp)
			}
		}
	}
	if backend == BackendDocker {
		out, err := exec.Command("docker", "ps", "-aq", "--filter", "label="+sandbox.LabelPoolOwner+"="+owner).Output()
		if err != nil || strings.TrimSpace(string(out)) != "" {
			t.Errorf("pooled containers left: %q (%v)", out, err)
		}
	}
}

func TestPoolBenchmarkRefusesGVisor(t *testing.T) {
	for _, backends := range [][]string{{BackendGVisor}, {BackendDocker, BackendLocal}} {
		_, err := Pool(context.Background(), SandboxOptions{Backends: backends, GuestBinary: os.Args[0]}, nil)
		if err == nil || !strings.Contains(err.Error(), "gvisor starts cold") {
			t.Errorf("Pool on %v = %v, want a refusal", backends, err)
		}
	}
}
