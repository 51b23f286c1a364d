package local

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/agentbox/agentbox/internal/sandbox"
)

// TestLimitFiles pins what each cgroup version is told for a spec: the
// v2 half cannot run for real on a v1 host.
func TestLimitFiles(t *testing.T) {
	l := sandbox.Limits{CPUs: 1.5, MemoryBytes: 256 << 20, Pids: 100, TmpBytes: 1 << 20}
	v2 := &cgroups{version: cgroupV2, root: "/cg", parent: "agentbox"}
	want2 := []cgroupWrite{
		{path: "/cg/agentbox/sb_1/memory.max", value: "268435456"},
		{path: "/cg/agentbox/sb_1/memory.swap.max", value: "0", optional: true},
		{path: "/cg/agentbox/sb_1/pids.max", value: "100"},
		{path: "/cg/agentbox/sb_1/cpu.max", value: "150000 100000"},
	}
	if diff := cmp.Diff(want2, v2.limitFiles("sb_1", l), cmp.AllowUnexported(cgroupWrite{})); diff != "" {
		t.Errorf("v2 (-want +got):\n%s", diff)
	}
	v1 := &cgroups{version: cgroupV1, root: "/cg", parent: "agentbox", hier: map[string]string{
		"memory": "/cg/memory", "pids": "/cg/pids", "cpu": "/cg/cpu,cpuacct", "cpuacct": "/cg/cpu,cpuacct",
	}, hiers: []string{"/cg/memory", "/cg/pids", "/cg/cpu,cpuacct"}}
	want1 := []cgroupWrite{
		{path: "/cg/memory/agentbox/sb_1/memory.limit_in_bytes", value: "268435456"},
		{path: "/cg/memory/agentbox/sb_1/memory.memsw.limit_in_bytes", value: "268435456", optional: true},
		{path: "/cg/memory/agentbox/sb_1/memory.swappiness", value: "0", optional: true},
		{path: "/cg/pids/agentbox/sb_1/pids.max", value: "100"},
		{path: "/cg/cpu,cpuacct/agentbox/sb_1/cpu.cfs_period_us", value: "100000"},
		{path: "/cg/cpu,cpuacct/agentbox/sb_1/cpu.cfs_quota_us", value: "150000"},
	}
	if diff := cmp.Diff(want1, v1.limitFiles("sb_1", l), cmp.AllowUnexported(cgroupWrite{})); diff != "" {
		t.Errorf("v1 (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"/cg/memory/agentbox/sb_1", "/cg/pids/agentbox/sb_1", "/cg/cpu,cpuacct/agentbox/sb_1"}, v1.dirs("sb_1")); diff != "" {
		t.Errorf("v1 dirs (-want +got):\n%s", diff)
	}
	// The smallest quota the kernel takes is 1ms a period.
	tiny := v2.limitFiles("sb_1", sandbox.Limits{CPUs: 0.001, MemoryBytes: 1, Pids: 1, TmpBytes: 1})
	if got := tiny[3].value; got != "1000 100000" {
		t.Errorf("tiny quota %q", got)
	}
}
