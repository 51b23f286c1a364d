package local

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/agentbox/agentbox/internal/image"
	"github.com/agentbox/agentbox/internal/testutil/skip"
	"go.uber.org/goleak"
)

// These tests run real bubblewrap jails with real cgroups, as root: they
// skip without root or bubblewrap, and fail instead under
// AGENTBOX_REQUIRE_SETUP=1 (CI).

// canaryEnv is set in the test process, the daemon's stand-in: no sandbox
// may ever see it.
const canaryEnv = "AWS_SECRET_ACCESS_KEY"

var canaryValue = fmt.Sprintf("canary-%d-%d", os.Getpid(), time.Now().UnixNano())

var (
	// setupErr says why the jail tests cannot run here.
	setupErr error
	// assets holds the guest, the probe and the images, all under a
	// directory only root can enter: staging must make them reachable.
	assets    string
	guestBin  string
	probeBin  string
	imagesDir string
)

func TestMain(m *testing.M) {
	os.Exit(runTests(m))
}

func runTests(m *testing.M) int {
	if os.Getenv(crashDaemonEnv) != "" {
		return crashDaemon()
	}
	dir, err := os.MkdirTemp("", "agentbox-local-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	assets = dir
	setupErr = setup(dir)
	os.Setenv(canaryEnv, canaryValue)
	code := m.Run()
	// Every backend was closed and every sandbox removed: nothing of
	// theirs may still run in this process.
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintf(os.Stderr, "leaked goroutines: %v\n", err)
			return 1
		}
	}
	return code
}

func setup(dir string) error {
	if os.Geteuid() != 0 {
		return fmt.Errorf("the local backend needs root")
	}
	if _, err := exec.LookPath("bwrap"); err != nil {
		return fmt.Errorf("bubblewrap is not installed")
	}
	guestBin = filepath.Join(dir, "bin", "agentbox-guest")
	probeBin = filepath.Join(dir, "bin", "probe")
	for _, b := range []struct{ out, pkg string }{
		{guestBin, "github.com/agentbox/agentbox/cmd/agentbox-guest"},
		{probeBin, "./testdata/probe"},
	} {
		build := exec.Command("go", "build", "-trimpath", "-o", b.out, b.pkg)
		build.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := build.CombinedOutput(); err != nil {
			return fmt.Errorf("building %s: %v\n%s", b.pkg, err, out)
		}
	}
	imagesDir = filepath.Join(dir, "images")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if _, err := image.Build(ctx, image.BuildOptions{
		Kind: image.KindBusybox, RootfsDir: filepath.Join(imagesDir, "busybox", "rootfs"), NoEngine: true,
	}); err != nil {
		return fmt.Errorf("building the busybox root file system: %w", err)
	}
	return nil
}

// requireJails skips (or fails under AGENTBOX_REQUIRE_SETUP=1) when the
// jail tests cannot run here.
func requireJails(t *testing.T) {
	t.Helper()
	if setupErr == nil {
		return
	}
	skip.OrFail(t, setupErr.Error())
}
