package local

import (
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/agentbox/agentbox/internal/mountinfo"
	"github.com/agentbox/agentbox/internal/sandbox"
)

// TestSpawnerNamespace checks that the spawner thread starts bubblewrap
// from a mount namespace of its own that holds a few mounts and none of
// the daemon's data (the state dir), while the process's own mount table
// (/proc/self, which the backend and the manager read) stays the
// daemon's, stage included.
func TestSpawnerNamespace(t *testing.T) {
	t.Parallel()
	b := newBackend(t)
	if b.sp.tid == os.Getpid() {
		t.Fatal("the spawner runs on the main thread, whose mount table /proc/self shows")
	}
	mps, err := mountinfo.Under(b.stageDir)
	if err != nil {
		t.Fatal(err)
	}
	if len(mps) == 0 {
		t.Fatalf("the stage %s is not in the process's mount table", b.stageDir)
	}
	host, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	small, err := os.ReadFile("/proc/self/task/" + strconv.Itoa(b.sp.tid) + "/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	nh, ns := strings.Count(string(host), "\n"), strings.Count(string(small), "\n")
	t.Logf("mounts: %d in the daemon's namespace, %d in the spawner's", nh, ns)
	if ns >= nh {
		t.Errorf("the spawner's namespace holds %d mounts, the daemon's %d", ns, nh)
	}
	if !strings.Contains(string(small), " "+b.stageDir+" ") {
		t.Errorf("the stage %s is not in the spawner's namespace:\n%s", b.stageDir, small)
	}
	for _, line := range strings.Split(string(small), "\n") {
		if f := strings.Fields(line); len(f) > 4 && f[4] == "/" && strings.Contains(line, " - tmpfs agentbox-spawner ") {
			continue
		}
		if strings.Contains(line, b.opts.StateDir) {
			t.Errorf("the spawner's namespace shows the state dir: %s", line)
		}
	}

	// A sandbox still starts, and its stage binds reached the spawner.
	x := startBox(t, b, sandbox.Spec{})
	if got := x.mustSh(t, "echo ok"); strings.TrimSpace(got) != "ok" {
		t.Errorf("command in a sandbox: %q", got)
	}
}
