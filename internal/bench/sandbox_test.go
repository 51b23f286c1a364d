package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/agentbox/agentbox/internal/sandbox/backendtest"
	"github.com/agentbox/agentbox/internal/store"
)

// sandboxOptions returns options for every backend, or skips (fails under
// AGENTBOX_REQUIRE_SETUP=1) when this host cannot run them all.
func sandboxOptions(t *testing.T) SandboxOptions {
	t.Helper()
	if os.Geteuid() != 0 {
		backendtest.SkipOrFail(t, "the execution benchmarks mount workspaces and start jails: run as root")
	}
	if out, err := exec.Command("docker", "info", "--format", "{{json .Runtimes}}").Output(); err != nil {
		backendtest.SkipOrFail(t, "no docker engine: "+err.Error())
	} else if !strings.Contains(string(out), `"runsc"`) {
		backendtest.SkipOrFail(t, "the engine has no runsc runtime (scripts/setup.sh)")
	}
	if _, err := exec.LookPath("bwrap"); err != nil {
		backendtest.SkipOrFail(t, "no bubblewrap")
	}
	guest, err := backendtest.BuildGuest(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	// Explicit backends: one that does not work is an error, not a skip.
	return SandboxOptions{Backends: AllBackends, Image: DefaultImage, Runs: 2, Concurrency: 2, GuestBinary: guest}
}

// made lists the sandboxes an environment created (from its event log)
// and their backend references.
func made(t *testing.T, e *env) map[string]string {
	t.Helper()
	evs, err := e.m.Events(context.Background(), store.EventFilter{})
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, ev := range evs {
		if ev.Type != "sandbox.created" {
			continue
		}
		var d struct{ Backend, Ref string }
		json.Unmarshal([]byte(ev.Detail), &d)
		out[ev.SandboxID] = d.Backend + " " + d.Ref
	}
	return out
}

// checkGone checks that nothing of the sandboxes is left: no container,
// no local cgroup, no baseline container of the run, nothing under the
// scratch dir.
func checkGone(t *testing.T, runID, root string, sbs map[string]string) {
	t.Helper()
	for id, br := range sbs {
		backend, ref, _ := strings.Cut(br, " ")
		switch backend {
		case BackendDocker, BackendGVisor:
			if out, err := exec.Command("docker", "inspect", "--format", "{{.State.Status}}", ref).CombinedOutput(); err == nil {
				t.Errorf("sandbox %s: container %.12s left (%s)", id, ref, strings.TrimSpace(string(out)))
			}
		case BackendLocal:
			left, _ := filepath.Glob("/sys/fs/cgroup/*/agentbox/" + id)
			left2, _ := filepath.Glob("/sys/fs/cgroup/agentbox/" + id)
			if len(left)+len(left2) > 0 {
				t.Errorf("sandbox %s: cgroups left: %v", id, append(left, left2...))
			}
		}
	}
	out, err := exec.Command("docker", "ps", "-aq", "--filter", "label="+LabelBench+"="+runID).Output()
	if err != nil || strings.TrimSpace(string(out)) != "" {
		t.Errorf("baseline containers left: %q (%v)", out, err)
	}
	if _, err := os.Stat(root); !os.IsNotExist(err) {
		t.Errorf("scratch dir %s left (%v)", root, err)
	}
}

// checkRows checks that the rows are exactly want (backend/case), each
// with runs runs and sane durations.
func checkRows(t *testing.T, res SandboxResult, runs int, want []string) {
	t.Helper()
	var got []string
	for _, r := range res.Rows {
		got = append(got, r.Backend+"/"+r.Case)
		if r.Runs != runs || r.Median <= 0 || r.P90 < r.Median || r.P90 > 10*time.Minute {
			t.Errorf("row %+v: want %d runs, 0 < median <= p90", r, runs)
		}
	}
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("rows %v\nwant %v", got, want)
	}
	var out bytes.Buffer
	res.Print(&out)
	for _, w := range append(want, "median", "p90") {
		_, c, _ := strings.Cut(w, "/")
		if !strings.Contains(out.String(), c) && !strings.Contains(out.String(), w) {
			t.Errorf("printed table lacks %q:\n%s", w, out.String())
		}
	}
	if _, err := json.Marshal(res); err != nil {
		t.Error(err)
	}
}

// checkChecks checks that every named check is there with a value.
func checkChecks(t *testing.T, res SandboxResult, names ...string) {
	t.Helper()
	for _, n := range names {
		i := slices.IndexFunc(res.Checks, func(c Check) bool { return c.Name == n })
		if i < 0 {
			t.Errorf("no check %q in %+v", n, res.Checks)
			continue
		}
		if c := res.Checks[i]; c.Ratio <= 0 && c.Value <= 0 {
			t.Errorf("check %+v has no value", c)
		}
	}
}

// TestSandboxBenchmarks runs each execution benchmark twice on every
// backend, for real, and checks the shape of the results and that nothing
// is left behind. It never looks at how long anything took.
func TestSandboxBenchmarks(t *testing.T) {
	opts := sandboxOptions(t)
	ctx := context.Background()
	// A short TMPDIR: the guest's socket path must fit in sun_path.
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

	res, err := e.execBench(ctx)
	if err != nil {
		t.Fatal(err)
	}
	checkRows(t, res, 2, []string{
		"docker/" + CaseExecManager, "docker/" + CaseExecAPI, "docker/" + CaseDockerExec,
		"gvisor/" + CaseExecManager, "gvisor/" + CaseExecAPI, "gvisor/" + CaseDockerExec,
		"local/" + CaseExecManager, "local/" + CaseExecAPI, "host/" + CaseHostExec,
		"docker/" + CaseSandboxExec, "gvisor/" + CaseSandboxExec, "local/" + CaseSandboxExec,
	})
	checkChecks(t, res, "docker: API median", "docker: docker exec / API (speed-up)", "gvisor: docker exec / API (speed-up)",
		"local: API median", "local: docker exec / API (speed-up)",
		"docker: API / fork/exec inside", "gvisor: API / fork/exec inside", "local: API / fork/exec inside")

	// Without the docker exec baseline: the same rows but that one.
	e.opts.NoDockerExec = true
	res, err = e.execBench(ctx)
	e.opts.NoDockerExec = false
	if err != nil {
		t.Fatal(err)
	}
	checkRows(t, res, 2, []string{
		"docker/" + CaseExecManager, "docker/" + CaseExecAPI, "gvisor/" + CaseExecManager, "gvisor/" + CaseExecAPI,
		"local/" + CaseExecManager, "local/" + CaseExecAPI, "host/" + CaseHostExec,
		"docker/" + CaseSandboxExec, "gvisor/" + CaseSandboxExec, "local/" + CaseSandboxExec,
	})
	checkChecks(t, res, "docker: API median", "docker: API / fork/exec inside")

	res, err = e.createBench(ctx)
	if err != nil {
		t.Fatal(err)
	}
	checkRows(t, res, 2, []string{
		"docker/" + CaseCreateExec, "docker/" + CaseDockerRun, "gvisor/" + CaseCreateExec, "gvisor/" + CaseDockerRun,
		"local/" + CaseCreateExec, "local/" + CaseBwrap,
	})
	checkChecks(t, res, "docker: agentbox / docker run", "gvisor: agentbox / docker run", "local: median", "local: agentbox / bwrap")

	res, err = e.concurrentBench(ctx)
	if err != nil {
		t.Fatal(err)
	}
	checkRows(t, res, 2, []string{
		"docker/" + CaseConcurrentAgentbox, "docker/" + CaseConcurrentDocker, "gvisor/" + CaseConcurrentAgentbox,
		"gvisor/" + CaseConcurrentDocker, "local/" + CaseConcurrentAgentbox,
	})
	checkChecks(t, res, "docker: agentbox / docker run (runc)", "gvisor: agentbox / docker run (runsc)", "local: agentbox / docker run (runc)")

	// Every sandbox was removed after its run; close removes the rest.
	if left, _ := e.m.ListSandboxes(ctx, ""); len(left) != 0 {
		t.Errorf("%d sandboxes still recorded after the benchmarks", len(left))
	}
	sbs := made(t, e)
	// exec: one per backend, twice; create: 2 runs; concurrent: 2 x 2.
	if want := 3 * (2 + 2 + 4); len(sbs) != want {
		t.Errorf("%d sandboxes created, want %d", len(sbs), want)
	}
	runID, root := e.runID, e.root
	closed = true
	if err := e.close(); err != nil {
		t.Fatalf("close: %v", err)
	}
	checkGone(t, runID, root, sbs)
	if entries, _ := os.ReadDir(tmp); len(entries) != 0 {
		t.Errorf("temporary dir holds %v after close", entries)
	}
}

// TestProfileCreate checks the breakdown: every backend profiled, the
// steps that must be there are, and the depth 0 steps add up to the total.
func TestProfileCreate(t *testing.T) {
	opts := sandboxOptions(t)
	opts.Profile = 1
	ctx := context.Background()
	e, err := newEnv(ctx, opts, testLog{t}, &recorder{})
	if err != nil {
		t.Fatal(err)
	}
	e.noWarmup = true
	ps, err := e.profileCreate(ctx, 2)
	sbs := made(t, e)
	runID, root := e.runID, e.root
	if cerr := e.close(); cerr != nil {
		t.Errorf("close: %v", cerr)
	}
	if err != nil {
		t.Fatal(err)
	}
	checkGone(t, runID, root, sbs)
	if len(ps) != len(AllBackends) {
		t.Fatalf("%d profiles, want %d", len(ps), len(AllBackends))
	}
	for _, p := range ps {
		names := map[string]bool{}
		var sum time.Duration
		for _, s := range p.Steps {
			names[s.Name] = true
			if s.Depth == 0 {
				sum += s.Median
			}
		}
		want := []string{"create: backend.Create", "create: store.CreateSandbox (write)", "create: guest start and connect (wait in Accept)",
			"exec: guest round trip: exec `true`", "exec: store.CreateExec (write)"}
		switch p.Backend {
		case BackendDocker, BackendGVisor:
			want = append(want, "  docker API POST /containers/create", "  docker API POST /containers/{id}/start")
		case BackendLocal:
			want = append(want, "  local: namespaces", "  local: jail")
		}
		for _, w := range want {
			if !names[w] {
				t.Errorf("%s: no step %q in %v", p.Backend, w, p.Steps)
			}
		}
		warm := map[string]bool{}
		for _, s := range p.Warm.Steps {
			warm[s.Name] = true
		}
		for _, w := range []string{"exec: guest round trip: exec `true`", "exec: store.CreateExec (write)", "exec: store.FinishExec (write)"} {
			if !warm[w] {
				t.Errorf("%s: warm exec: no step %q in %v", p.Backend, w, p.Warm.Steps)
			}
		}
		if p.Runs != 2 || p.Median <= 0 || sum <= 0 || p.Warm.Median <= 0 {
			t.Errorf("%s: profile %+v", p.Backend, p)
		}
		var out bytes.Buffer
		p.Print(&out)
		if !strings.Contains(out.String(), "guest start and connect") {
			t.Errorf("printed profile:\n%s", out.String())
		}
	}
}

func TestBreakdown(t *testing.T) {
	t0 := time.Unix(1000, 0)
	ms := func(n int) time.Duration { return time.Duration(n) * time.Millisecond }
	at := func(n int) time.Time { return t0.Add(ms(n)) }
	spans := []span{
		{phase: "create", name: "store.CreateSandbox (write)", start: at(1), dur: ms(2)},
		{phase: "create", name: "backend.Create", start: at(4), dur: ms(10)},
		{phase: "create", name: "docker API POST /containers/create", depth: 1, start: at(5), dur: ms(3)},
		{phase: "create", name: "store.UpdateSandbox (write)", start: at(20), dur: ms(1)},
		{phase: "exec", depth: -1, start: at(22)},
		{phase: "exec", name: "store.CreateExec (write)", start: at(23), dur: ms(1)},
		{phase: "exec", name: "store.FinishExec (write)", start: at(26), dur: ms(1)},
	}
	st, depths := breakdown(spans, t0, at(30))
	want := map[string]time.Duration{
		"create: manager: entry":                               ms(1),
		"create: store.CreateSandbox (write)":                  ms(2),
		"create: manager: run dir, chown, guest socket listen": ms(1),
		"create: backend.Create":                               ms(10),
		"  docker API POST /containers/create":                 ms(3),
		"create: guest start and connect (wait in Accept)":     ms(6),
		"create: store.UpdateSandbox (write)":                  ms(1),
		"create: manager: return":                              ms(1),
		"exec: manager: entry":                                 ms(1),
		"exec: store.CreateExec (write)":                       ms(1),
		"exec: guest round trip: exec `true`":                  ms(2),
		"exec: store.FinishExec (write)":                       ms(1),
		"exec: manager: return":                                ms(3),
	}
	var sum time.Duration
	for _, name := range st.order {
		if depths[name] == 0 {
			sum += st.d[name]
		}
	}
	if sum != ms(30) {
		t.Errorf("depth 0 steps add up to %v, want 30ms", sum)
	}
	if len(st.d) != len(want) {
		t.Errorf("steps %v\nwant %v", st.d, want)
	}
	for k, v := range want {
		if st.d[k] != v {
			t.Errorf("step %q = %v, want %v", k, st.d[k], v)
		}
	}
}

func TestEnginePath(t *testing.T) {
	for in, want := range map[string]string{
		"/v1.41/containers/create":             "/containers/create",
		"/v1.41/containers/abc123/start":       "/containers/{id}/start",
		"/v1.41/containers/agentbox-sb_x/json": "/containers/{id}/json",
		"/_ping":                               "/_ping",
		"/v1.41/containers/json":               "/containers/json",
	} {
		if got := enginePath(in); got != want {
			t.Errorf("enginePath(%q) = %q, want %q", in, got, want)
		}
	}
}
