package main

import (
	"crypto/sha256"
	"encoding/hex"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentbox/agentbox/internal/mountinfo"
	"github.com/agentbox/agentbox/internal/testutil"
	"github.com/agentbox/agentbox/internal/testutil/skip"
)

// TestWarmPoolLocalE2E: a daemon configured with a warm pool of the local
// backend fills it (the ready gauge), and the first exec on a new
// workspace runs in the pooled jail (a hit) with the workspace's files at
// /workspace, read-write, nosuid, nodev; once the daemon has stopped,
// nothing of the pool is left mounted.
func TestWarmPoolLocalE2E(t *testing.T) {
	if os.Geteuid() != 0 {
		skip.OrFail(t, "the local backend needs root")
	}
	if _, err := exec.LookPath("bwrap"); err != nil {
		skip.OrFail(t, "no bubblewrap")
	}
	data := t.TempDir()
	const img = "agentbox/busybox:latest"
	cfg := filepath.Join(t.TempDir(), "agentbox.yaml")
	doc := "default_backend: local\ndefault_image: " + img + "\nwarm_pool: [{backend: local, image: " + img + ", size: 1}]\n"
	if err := os.WriteFile(cfg, []byte(doc), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, errOut, code := runCLI(t, data, "", "--json", "image", "build", "--kind", "busybox", "--no-engine"); code != 0 {
		t.Fatalf("image build --no-engine: %s %s", out, errOut)
	}
	src := testutil.NewRepo(t, map[string]string{"hello.txt": "hello\n"})
	d := startDaemon(t, data, "--config", cfg)
	stopped := false
	defer func() {
		if !stopped {
			d.stop(t)
		}
	}()
	cleanupAll(t, data, "--config", cfg)

	ready := `agentbox_warm_pool_ready{backend="local",image="` + img + `"} 1`
	deadline := time.Now().Add(time.Minute)
	for !strings.Contains(scrape(t, data), ready) {
		if time.Now().After(deadline) {
			t.Fatalf("the local pool was not filled within a minute:\n%s", d.logs)
		}
		time.Sleep(50 * time.Millisecond) // polling for the pool, bounded
	}

	out, errOut, code := runCLI(t, data, "", "--json", "ws", "create", "--repo", src.Dir)
	if code != 0 {
		t.Fatalf("ws create: %s %s", out, errOut)
	}
	ws := oneJSON(t, out)["id"].(string)
	out, errOut, code = runCLI(t, data, "", "exec", ws, "--", "sh", "-c", "ls /workspace; grep ' /workspace ' /proc/self/mountinfo | tail -n 1")
	if code != 0 {
		t.Fatalf("exec: exit %d %q %q", code, out, errOut)
	}
	list, mnt, _ := strings.Cut(out, "\n")
	if f := strings.Fields(mnt); list != "hello.txt" || len(f) < 6 || !strings.HasPrefix(f[5], "rw,") || !strings.Contains(f[5], "nosuid") || !strings.Contains(f[5], "nodev") {
		t.Errorf("the pooled sandbox sees %q, want hello.txt on a rw,nosuid,nodev /workspace", out)
	}
	if m := scrape(t, data); !strings.Contains(m, `agentbox_warm_pool_claims_total{backend="local",image="`+img+`",result="hit"} 1`) {
		t.Errorf("no hit counted:\n%s", m)
	}

	d.stop(t)
	stopped = true
	// The local backend's stage (local.Options.StageDir's default) is gone
	// with every pool point in it, claimed or not.
	sum := sha256.Sum256([]byte(filepath.Join(data, "local")))
	stage := "/run/agentbox-local-" + hex.EncodeToString(sum[:])[:12]
	if mps, err := mountinfo.Under(stage); err != nil || len(mps) != 0 {
		t.Errorf("mounts left in the stage %s after the daemon stopped: %v %v", stage, mps, err)
	}
}
