// A measurement: it asserts nothing about time, takes minutes, and so is
// built only with -tags measure (scripts/test.sh vets it so).

//go:build measure

package battery

import (
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/agentbox/agentbox/internal/guest"
	"github.com/agentbox/agentbox/internal/image"
	"github.com/agentbox/agentbox/internal/manager"
	"github.com/agentbox/agentbox/internal/sandbox"
	"github.com/agentbox/agentbox/internal/sandbox/backendtest"
)

// suiteScript runs a real suite, part of networkx's own (1,929 tests of shortest paths,
// flow, graph classes and isomorphism), from a copy in dir, and prints pytest's summary.
const suiteScript = `rm -rf "$1/networkx" && cp -r /usr/lib/python3/dist-packages/networkx "$1/" && cd "$1" &&
python3 -m pytest -q -p no:cacheprovider networkx/algorithms/shortest_paths networkx/algorithms/flow networkx/classes networkx/algorithms/isomorphism | tail -n 1; s=$?; rm -rf "$1/networkx"; exit $s`

// TestRealSuiteRatio measures the real suite's wall time in a sandbox of each backend
// against the host (a chroot into the tool image's unpacked root, as the sandbox user),
// side by side, interleaved, in one run, and logs the medians of AGENTBOX_SUITE_RATIO
// rounds (5 by default):
//
//	go test -tags measure -run TestRealSuiteRatio -v -timeout 1h ./internal/battery
func TestRealSuiteRatio(t *testing.T) {
	rounds, _ := strconv.Atoi(os.Getenv("AGENTBOX_SUITE_RATIO"))
	if rounds <= 0 {
		rounds = 5
	}
	requireSetup(t)
	ensureToolImage(t)
	u, err := image.Unpack(t.Context(), toolImage, image.DefaultCache)
	if err != nil {
		t.Fatal(err)
	}
	type target struct {
		name string
		run  func() (time.Duration, string)
	}
	host := target{"host", func() (time.Duration, string) {
		// A private mount namespace with /proc, /dev and a fresh /tmp over the
		// unpacked root, then the suite as the sandbox user.
		script := `set -e; r=$1; mount --make-rprivate /; mount -t proc proc "$r/proc"; mount --rbind /dev "$r/dev"; mount -t tmpfs tmpfs "$r/tmp"
exec chroot --userspec=1000:1000 "$r" env -i PATH=/usr/local/bin:/usr/bin:/bin HOME=/tmp bash -c "$2" suite /tmp`
		start := time.Now()
		out, err := exec.CommandContext(t.Context(), "unshare", "-m", "sh", "-c", script, "host", u.Rootfs, suiteScript).CombinedOutput()
		if err != nil {
			t.Fatalf("host: %v %s", err, out)
		}
		return time.Since(start), strings.TrimSpace(string(out))
	}}
	targets := []target{host}
	for _, name := range backends {
		e := newEnv(t, name)
		w, err := e.m.CreateWorkspace(t.Context(), manager.CreateRequest{Repo: e.repo.ID, Task: "suite"})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := e.m.CreateSandbox(t.Context(), w.ID, sandbox.Spec{Image: toolImage, Limits: sandbox.Limits{MemoryBytes: 2 << 30, CPUs: 2, Pids: 1024}}); err != nil {
			t.Fatal(err)
		}
		targets = append(targets, target{name, func() (time.Duration, string) {
			var out, errOut syncBuffer
			start := time.Now()
			res, err := e.m.Exec(t.Context(), w.ID, guest.ExecRequest{Argv: []string{"bash", "-c", suiteScript, "suite", "/workspace"}, Timeout: 10 * time.Minute}, nil, &out, &errOut)
			took := time.Since(start)
			if err != nil || res.ExitCode != 0 {
				t.Fatalf("%s: %v %+v %s %s", name, err, res, out.String(), tail(errOut.String(), 2000))
			}
			return took, strings.TrimSpace(out.String())
		}})
	}
	times := map[string][]time.Duration{}
	for i := range rounds {
		for _, tg := range targets {
			d, summary := tg.run()
			times[tg.name] = append(times[tg.name], d)
			t.Logf("round %d %-6s %6.2fs  %s", i+1, tg.name, d.Seconds(), summary)
		}
	}
	hostMedian := backendtest.Median(times["host"])
	for _, tg := range targets {
		m := backendtest.Median(times[tg.name])
		t.Logf("%-6s median %6.2fs over %d rounds, ratio to the host %.2f", tg.name, m.Seconds(), rounds, float64(m)/float64(hostMedian))
	}
}
