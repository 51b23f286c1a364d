package bench

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/agentbox/agentbox/internal/config"
	"github.com/agentbox/agentbox/internal/sandbox/backendtest"
	"github.com/agentbox/agentbox/internal/store"
)

// TestEgressBenchmark runs the egress benchmark once, tiny, on the local
// backend, and checks the shape of the result and that the sandbox side
// went through the proxy: the upstream saw its requests under
// UpstreamHost, the direct ones under 127.0.0.1, and the proxy's decisions
// are in the event log. It never looks at how long anything took.
func TestEgressBenchmark(t *testing.T) {
	if os.Geteuid() != 0 {
		backendtest.SkipOrFail(t, "the egress benchmark mounts workspaces and starts jails: run as root")
	}
	if _, err := exec.LookPath("bwrap"); err != nil {
		backendtest.SkipOrFail(t, "no bubblewrap")
	}
	if _, err := exec.LookPath("python3"); err != nil {
		backendtest.SkipOrFail(t, "no python3 on the host for the direct baseline")
	}
	// The Debian root the CLI's bench uses: `agentbox image build --kind
	// debian` (scripts/test.sh) fills it; building it here would take
	// minutes and the network.
	cfg, err := config.Load("")
	if err != nil {
		t.Fatal(err)
	}
	images := filepath.Join(cfg.DataDir, "images")
	if _, err := os.Stat(filepath.Join(images, "debian", "rootfs", "usr", "bin", "python3")); err != nil {
		backendtest.SkipOrFail(t, "the Debian image's root is not in "+images+": run agentbox image build --kind debian")
	}
	guestBin, err := backendtest.BuildGuest(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	const n, size = 5, 1 << 20
	opts := SandboxOptions{Backends: []string{BackendLocal}, Runs: 1, GuestBinary: guestBin, ImagesDir: images,
		EgressBytes: size, EgressRequests: n}.withDefaults(DefaultEgressRuns)
	opts.Image = opts.EgressImage
	if err := opts.validate(); err != nil {
		t.Fatal(err)
	}
	// A short TMPDIR: the guest's socket path must fit in sun_path.
	tmp, err := os.MkdirTemp("/tmp", "abt-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Remove(tmp) })
	t.Setenv("TMPDIR", tmp)

	ctx := context.Background()
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
	up, err := startUpstream(size)
	if err != nil {
		t.Fatal(err)
	}
	defer up.close()

	res, err := e.egressWith(ctx, up)
	if err != nil {
		t.Fatal(err)
	}
	checkRows(t, res, 1, []string{
		"local/" + CaseDownloadProxy, "local/" + CaseHTTPProxy, "local/" + CaseConnectProxy,
		"host/" + CaseDownloadDirect, "host/" + CaseHTTPDirect, "host/" + CaseConnectDirect,
	})
	for _, r := range res.Rows {
		isDownload := strings.Contains(r.Case, "/big")
		if isDownload && (r.Bytes != size || r.Ops != 0) || !isDownload && (r.Bytes != 0 || r.Ops != n) {
			t.Errorf("row %+v: want bytes %d for the download, ops %d for the others", r, size, n)
		}
	}
	for _, c := range res.Checks {
		if c.Ratio == 0 && c.Value == 0 {
			t.Errorf("check %+v has no value", c)
		}
	}
	checkChecks(t, res, "local: download throughput, proxy / direct")
	var names []string
	for _, c := range res.Checks {
		names = append(names, c.Name+" "+c.Target)
	}
	want := []string{"local: download throughput, proxy / direct >= 0.5x", "local: added per new-connection HTTP request ",
		"local: added per new CONNECT (+ TLS, GET) <= 2.00 ms"}
	if d := cmp.Diff(want, names); d != "" {
		t.Errorf("checks (-want +got):\n%s", d)
	}
	var out bytes.Buffer
	res.Print(&out)
	for _, w := range []string{"MB/s", "/op", "egress proxy", "host 3."} {
		if !strings.Contains(out.String(), w) {
			t.Errorf("printed result lacks %q:\n%s", w, out.String())
		}
	}

	// Through the proxy under the sandbox's name; directly under the
	// address; nothing else.
	via, direct := UpstreamHost+":", "127.0.0.1:"
	wantSeen := map[string]int{
		"http://" + via + up.port + "/big": 1, "http://" + via + up.port + "/small": n, "https://" + via + up.tlsPort + "/small": n,
		"http://" + direct + up.port + "/big": 1, "http://" + direct + up.port + "/small": n, "https://" + direct + up.tlsPort + "/small": n,
	}
	up.mu.Lock()
	seen := up.seen
	up.mu.Unlock()
	if d := cmp.Diff(wantSeen, seen); d != "" {
		t.Errorf("requests the upstream received (-want +got):\n%s", d)
	}
	// The proxy carried each of the sandbox's requests and the manager
	// recorded its decision. A tunnel's decision comes when the tunnel
	// closes, which may be just after the client has finished.
	var allowed, denied []string
	deadline := time.Now().Add(10 * time.Second)
	for {
		evs, err := e.m.Events(ctx, store.EventFilter{})
		if err != nil {
			t.Fatal(err)
		}
		allowed, denied = nil, nil
		for _, ev := range evs {
			switch ev.Type {
			case "egress.allowed":
				allowed = append(allowed, ev.Detail)
			case "egress.denied":
				denied = append(denied, ev.Detail)
			}
		}
		if len(allowed) >= 1+2*n || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if len(allowed) != 1+2*n || len(denied) != 0 {
		t.Errorf("%d egress.allowed events, want %d; denied: %q", len(allowed), 1+2*n, denied)
	}

	sbs := made(t, e)
	runID, root, docker := e.runID, e.root, e.dockerOK
	closed = true
	if err := e.close(); err != nil {
		t.Fatalf("close: %v", err)
	}
	if docker {
		checkGone(t, runID, root, sbs)
	} else if _, err := os.Stat(root); !os.IsNotExist(err) {
		t.Errorf("scratch dir %s left (%v)", root, err)
	}
}
