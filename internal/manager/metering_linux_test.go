package manager

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/agentbox/agentbox/internal/store"
)

// burnScript makes a grandchild of the command burn CPU until the kernel
// has counted 0.3 s for it (utime, stime and its waited children's, in
// clock ticks of 10 ms), whatever the machine's load, while the command
// itself fills a 64 MiB buffer.
const burnScript = `sh -c 'while :; do set -- $(cat /proc/$$/stat); [ $((${14}+${15}+${16}+${17})) -ge 30 ] && break; done' &
dd if=/dev/zero of=/dev/null bs=64M count=1 2>/dev/null
wait
echo done`

// TestExecMetering runs a command whose tree burns CPU and allocates
// memory, and checks the exec's record, its event and log line, its
// sandbox's cgroup figures after a stop, and the task's usage.
func TestExecMetering(t *testing.T) {
	h, _ := sandboxHarness(t)
	ctx := t.Context()
	w := h.create(CreateRequest{Repo: h.repo.ID, Task: "metered"})
	res, out, errs := h.exec(w.ID, "sh", "-c", burnScript)
	if res.ExitCode != 0 || out != "done\n" {
		t.Fatalf("burn = %+v %q %q", res, out, errs)
	}
	const minCPU, minMem = 200 * time.Millisecond, 64 << 20
	if res.CPU() < minCPU || res.PeakMemBytes < minMem {
		t.Errorf("result: cpu %s (want >= %s), peak %d (want >= %d)", res.CPU(), minCPU, res.PeakMemBytes, minMem)
	}
	rec, err := h.st.GetExec(ctx, res.ExecID)
	if err != nil {
		t.Fatal(err)
	}
	if time.Duration(rec.CPUNanos) < minCPU || rec.PeakMemBytes < minMem || rec.WallNanos <= 0 || rec.Task != "metered" {
		t.Errorf("exec record: cpu %s, peak %d, wall %s, task %q", time.Duration(rec.CPUNanos), rec.PeakMemBytes, time.Duration(rec.WallNanos), rec.Task)
	}
	// A command that does nothing uses little: the figures are its own,
	// not the sandbox's so far.
	small, _, _ := h.exec(w.ID, "true")
	if small.CPU() >= minCPU || small.PeakMemBytes >= minMem {
		t.Errorf("true: cpu %s, peak %d", small.CPU(), small.PeakMemBytes)
	}

	// One exec.finished event per exec, naming it, with its usage.
	evs := h.events(w.ID, "exec.finished")
	if len(evs) != 2 {
		t.Fatalf("%d exec.finished events, want 2", len(evs))
	}
	var detail struct {
		ExecID string   `json:"exec_id"`
		State  string   `json:"state"`
		CPU    int64    `json:"cpu_ns"`
		Peak   int64    `json:"peak_mem_bytes"`
		Argv   []string `json:"argv"`
	}
	if err := json.Unmarshal([]byte(evs[0].Detail), &detail); err != nil {
		t.Fatal(err)
	}
	if detail.ExecID != res.ExecID || detail.State != store.ExecExited || detail.CPU != rec.CPUNanos || detail.Peak != rec.PeakMemBytes || len(detail.Argv) == 0 ||
		evs[0].SandboxID != res.SandboxID || evs[0].Actor == "" {
		t.Errorf("exec.finished event = %+v %s", evs[0], evs[0].Detail)
	}

	// Stopping the sandbox reads its cgroup: the whole environment used at
	// least what the command did.
	if _, err := h.m.StopSandbox(ctx, res.SandboxID); err != nil {
		t.Fatal(err)
	}
	su, err := h.m.SandboxUsage(ctx, res.SandboxID)
	if err != nil {
		t.Fatal(err)
	}
	if su.Execs != 2 || time.Duration(su.CPUNanos) < minCPU || su.PeakMemBytes < minMem ||
		time.Duration(su.CgroupCPUNanos) < minCPU || su.CgroupPeakMemBytes < minMem {
		t.Errorf("sandbox usage = %+v", su)
	}

	t.Logf("burn: cpu %s, peak %d MiB, wall %s; sandbox cgroup: cpu %s, peak %d MiB",
		res.CPU(), res.PeakMemBytes>>20, res.Duration, time.Duration(su.CgroupCPUNanos), su.CgroupPeakMemBytes>>20)

	us, err := h.m.Usage(ctx, store.UsageFilter{Task: "metered"})
	if err != nil {
		t.Fatal(err)
	}
	if len(us) != 1 || us[0].Execs != 2 || us[0].Workspaces != 1 || us[0].CPUNanos != su.CPUNanos || us[0].PeakMemBytes != rec.PeakMemBytes {
		t.Errorf("task usage = %+v", us)
	}
	if _, err := h.m.Usage(ctx, store.UsageFilter{Task: strings.Repeat("x", 300)}); err == nil {
		t.Error("a task label over 200 bytes was accepted")
	}
}
