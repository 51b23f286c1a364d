package bench

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/agentbox/agentbox/internal/sandbox/backendtest"
	"github.com/agentbox/agentbox/internal/testutil/skip"
)

// TestSuiteBenchmark runs the suite benchmark once on the docker backend,
// for real (about a minute), and checks the shape of the result: the host
// and the sandbox each ran the suite once, it passed in both, and the
// ratio is computed against its target. It never looks at how long
// anything took.
func TestSuiteBenchmark(t *testing.T) {
	if os.Geteuid() != 0 {
		skip.OrFail(t, "the suite benchmark mounts workspaces and chroots: run as root")
	}
	if err := exec.Command("docker", "info").Run(); err != nil {
		skip.OrFail(t, "no docker engine: "+err.Error())
	}
	guestBin, err := backendtest.BuildGuest(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	// A short TMPDIR: the guest's socket path must fit in sun_path.
	tmp, err := os.MkdirTemp("/tmp", "abt-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Remove(tmp) })
	t.Setenv("TMPDIR", tmp)

	res, err := Suite(context.Background(), SandboxOptions{Backends: []string{BackendDocker}, Runs: 1, GuestBinary: guestBin}, testLog{t})
	if err != nil {
		t.Fatal(err)
	}
	checkRows(t, res, 1, []string{"host/" + CaseSuiteHost, "docker/" + CaseSuiteSandbox})
	checkChecks(t, res, "docker: sandbox / host")
	if len(res.Checks) != 1 || res.Checks[0].Target != "<= 1.1x" {
		t.Errorf("checks %+v, want one, docker's, against <= 1.1x", res.Checks)
	}
	if res.Image != "agentbox/debian:tools" || res.Benchmark != "suite" {
		t.Errorf("benchmark %q on image %q, want suite on the tool image", res.Benchmark, res.Image)
	}
	// pytest's summary, the same in both places, says the suite passed.
	passed := 0
	for _, n := range res.Notes {
		if strings.HasPrefix(n, "pytest in ") {
			if !strings.Contains(n, " passed") || strings.Contains(n, "failed") || strings.Contains(n, "error") {
				t.Errorf("note %q: the suite did not pass", n)
			}
			passed++
		}
	}
	if passed != 2 {
		t.Errorf("%d pytest summaries in the notes, want 2: %q", passed, res.Notes)
	}
	var out bytes.Buffer
	res.Print(&out)
	if !strings.Contains(out.String(), "docker: sandbox / host") {
		t.Errorf("printed result lacks the ratio:\n%s", out.String())
	}
	if entries, _ := os.ReadDir(tmp); len(entries) != 0 {
		t.Errorf("temporary dir holds %v after the benchmark", entries)
	}
}

func TestPytestSummary(t *testing.T) {
	for _, tc := range []struct{ out, want string }{
		{"....\n1929 passed, 12 skipped in 19.21s\n", "1929 passed, 12 skipped"},
		{"...F\n==== 1 failed, 1928 passed in 20.02s (0:00:20) ====", "1 failed, 1928 passed"},
		{"1929 tests collected in 2.10s", "1929 tests collected"},
		{"", ""},
	} {
		if got := pytestSummary(tc.out); got != tc.want {
			t.Errorf("pytestSummary(%q) = %q, want %q", tc.out, got, tc.want)
		}
	}
}
