package testutil

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestClusterScriptKnowsItsOwnProcesses: a pid file of k8s-cluster.sh names
// a running part only while the same process (pid and start time) runs.
// /run is not a tmpfs on these machines, so pid files outlive a reboot or a
// restore from a snapshot, and a bare pid may by then name an unrelated
// process; believing it left etcd unstarted and the API server waiting on it
// until it timed out.
func TestClusterScriptKnowsItsOwnProcesses(t *testing.T) {
	run := t.TempDir()
	sleeper := exec.Command("sleep", "60")
	if err := sleeper.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sleeper.Process.Kill(); sleeper.Wait() })
	pid := sleeper.Process.Pid
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		t.Fatal(err)
	}
	fields := strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+2:]))
	start := fields[19] // field 22 of stat, counting from the state (field 3)

	script := filepath.Join("..", "..", "scripts", "k8s-cluster.sh")
	status := func() string {
		t.Helper()
		cmd := exec.Command("bash", script, "status")
		cmd.Env = append(os.Environ(), "AGENTBOX_K8S_RUN="+run)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("k8s-cluster.sh status: %v\n%s", err, out)
		}
		for _, line := range strings.Split(string(out), "\n") {
			if strings.HasPrefix(line, "etcd: ") {
				return strings.TrimPrefix(line, "etcd: ")
			}
		}
		t.Fatalf("no etcd line in %q", out)
		return ""
	}
	for _, c := range []struct {
		pidfile, want string
	}{
		{fmt.Sprintf("%d\n", pid), "stopped"},                                      // a bare pid, as older scripts wrote
		{fmt.Sprintf("%d 1\n", pid), "stopped"},                                    // the pid reused by another process
		{fmt.Sprintf("%d %s\n", pid, start), fmt.Sprintf("running (pid %d)", pid)}, // the process itself
		{"", "stopped"},
	} {
		if err := os.WriteFile(filepath.Join(run, "etcd.pid"), []byte(c.pidfile), 0o644); err != nil {
			t.Fatal(err)
		}
		if got := status(); got != c.want {
			t.Errorf("pid file %q: status says etcd %q, want %q", c.pidfile, got, c.want)
		}
	}
}
