package main

import (
	"bytes"
	"fmt"
	"os/exec"
	"testing"
	"time"

	"github.com/agentbox/agentbox/internal/bench"
	"github.com/agentbox/agentbox/internal/image"
	"github.com/agentbox/agentbox/internal/testutil/skip"
)

// requireDocker skips without an engine (fails under AGENTBOX_REQUIRE_SETUP=1)
// and builds the busybox image when it is missing.
func requireDocker(t *testing.T) {
	t.Helper()
	if err := exec.Command("docker", "info").Run(); err != nil {
		skip.OrFail(t, fmt.Sprintf("no docker engine: %v", err))
	}
	if _, err := image.Build(t.Context(), image.BuildOptions{Kind: image.KindBusybox}); err != nil {
		t.Fatal(err)
	}
}

// TestLoad is the CI-sized `agentbox bench load`: 32 clients doing mixed
// operations against a real daemon process, then every check of the
// benchmark (no error, memory flat, nothing left: containers, mounts,
// directories, rows, fds, goroutines). No check is on latency.
func TestLoad(t *testing.T) {
	requireDocker(t)
	var log bytes.Buffer
	res, err := bench.Load(t.Context(), bench.LoadOptions{
		DaemonOptions: bench.DaemonOptions{Binary: binary},
		Clients:       32,
		Duration:      20 * time.Second,
	}, &log)
	if err != nil {
		t.Fatalf("%v\n%s", err, log.String())
	}
	var out bytes.Buffer
	res.Print(&out)
	t.Logf("\n%s", out.String())
	if !res.OK() {
		t.Errorf("load checks failed\n%s", log.String())
	}
	for _, op := range res.Ops {
		if op.Count == 0 {
			t.Errorf("operation %s never completed", op.Op)
		}
	}
}

// TestDensitySmall runs the density benchmark's path at CI size: 10
// sandboxes in two steps, each swept. The 100 ms bound is not checked
// here (a loaded CI machine is no measurement); that every sandbox
// answers, and that the teardown removes everything and finds nothing
// left, is.
func TestDensitySmall(t *testing.T) {
	requireDocker(t)
	var log bytes.Buffer
	res, err := bench.Density(t.Context(), bench.DensityOptions{
		DaemonOptions: bench.DaemonOptions{Binary: binary},
		Target:        10, Step: 5, ExecBound: time.Hour,
	}, &log)
	if err != nil {
		t.Fatalf("%v\n%s", err, log.String())
	}
	var out bytes.Buffer
	res.Print(&out)
	t.Logf("\n%s", out.String())
	if res.Reached != 10 || len(res.Steps) != 2 || res.StopReason != "" {
		t.Fatalf("reached %d sandboxes in %d steps (%s), want 10 in 2", res.Reached, len(res.Steps), res.StopReason)
	}
	for _, s := range res.Steps {
		if s.RSS <= 0 || s.HeapInuse <= 0 || s.Goroutines <= 0 || s.FDs <= 0 || s.ExecP50 <= 0 || s.ExecMax < s.ExecP99 || s.ExecP99 < s.ExecP50 {
			t.Errorf("step %+v: figures missing or out of order", s)
		}
	}
	if td := res.Teardown; td.Workspaces != 10 || !td.Clean() || td.Took <= 0 {
		t.Errorf("teardown: %+v, want 10 workspaces removed and nothing left", td)
	}
	if !res.OK() {
		t.Errorf("checks: %+v", res.Checks)
	}
}
