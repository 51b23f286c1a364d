package battery

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/agentbox/agentbox/internal/image"
	"github.com/agentbox/agentbox/internal/sandbox/backendtest"
)

// canaryEnv is set in this process, the daemon's stand-in: no sandbox may
// ever see it (SECURITY.md E31 is another battery's; here it is one more
// needle for the scans of B12).
const canaryEnv = "AWS_SECRET_ACCESS_KEY"

var (
	canaryValue = "canary-" + randHex(12)
	// setupErr says why the battery cannot run here.
	setupErr error
	// assets is a root-only directory with the guest, the probe and the
	// local backend's images.
	assets    string
	guestBin  string
	probeBin  string
	imagesDir string
	// rootCanary is a file under /root with random content: the host's
	// home, which no sandbox may read.
	rootCanary, rootCanaryValue string
	// runtimeSums are the sha256 of the host's runtime binaries before the
	// battery (A10: they are unchanged afterwards).
	runtimeSums map[string]string
)

// runtimeBinaries are the host programs a sandbox escape would overwrite.
var runtimeBinaries = []string{"runc", "runsc", "bwrap", "dockerd", "containerd", "containerd-shim-runc-v2", "docker-init"}

func TestMain(m *testing.M) {
	os.Exit(runTests(m))
}

func runTests(m *testing.M) int {
	dir, err := os.MkdirTemp("", "agentbox-battery-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	assets = dir
	setupErr = setup(dir)
	os.Setenv(canaryEnv, canaryValue)
	// The engine's address in the daemon's environment is one more thing
	// no sandbox may see (B13); it is the default, so nothing changes.
	if os.Getenv("DOCKER_HOST") == "" {
		os.Setenv("DOCKER_HOST", "unix:///var/run/docker.sock")
	}
	if setupErr == nil {
		rootCanaryValue = "canary-root-" + randHex(12)
		rootCanary = filepath.Join("/root", "agentbox-battery-canary-"+randHex(4))
		if err := os.WriteFile(rootCanary, []byte(rootCanaryValue+"\n"), 0o600); err != nil {
			setupErr = err
		}
		defer os.Remove(rootCanary)
		runtimeSums = sumRuntimes()
	}
	code := m.Run()
	if setupErr == nil {
		after := sumRuntimes()
		for name, sum := range runtimeSums {
			if after[name] != sum {
				fmt.Fprintf(os.Stderr, "A10: the host's %s changed during the battery: sha256 %s, now %s\n", name, sum, after[name])
				code = 1
			}
		}
		if len(runtimeSums) < 3 {
			fmt.Fprintf(os.Stderr, "A10: only %d runtime binaries found to check: %v\n", len(runtimeSums), runtimeSums)
			code = 1
		}
	}
	return code
}

func setup(dir string) error {
	if os.Geteuid() != 0 {
		return fmt.Errorf("the battery needs root (overlay workspaces, cgroups, host censuses)")
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
	os.Chmod(guestBin, 0o755)
	imagesDir = filepath.Join(dir, "images")
	return nil
}

// localImagesOnce builds the local backend's busybox root file system the
// first time a local test needs it.
var localImagesErr = func() func() error {
	var done bool
	var err error
	return func() error {
		if !done {
			done = true
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			_, err = image.Build(ctx, image.BuildOptions{
				Kind: image.KindBusybox, RootfsDir: filepath.Join(imagesDir, "busybox", "rootfs"), NoEngine: true,
			})
		}
		return err
	}
}()

// requireSetup skips (or fails under AGENTBOX_REQUIRE_SETUP=1) when the
// battery cannot run here.
func requireSetup(t *testing.T) {
	t.Helper()
	if setupErr != nil {
		backendtest.SkipOrFail(t, setupErr.Error())
	}
}

func sumRuntimes() map[string]string {
	out := map[string]string{}
	paths := map[string]string{}
	for _, name := range runtimeBinaries {
		if p, err := exec.LookPath(name); err == nil {
			paths[name] = p
		}
	}
	// The runsc the engine runs is the one setup.sh built, off PATH.
	if b, err := exec.Command("docker", "info", "--format", "{{json .Runtimes}}").Output(); err == nil {
		var rts map[string]struct {
			Path string `json:"path"`
		}
		if json.Unmarshal(b, &rts) == nil && filepath.IsAbs(rts["runsc"].Path) {
			paths["runsc (registered)"] = rts["runsc"].Path
		}
	}
	for name, p := range paths {
		f, err := os.Open(p)
		if err != nil {
			continue
		}
		h := sha256.New()
		io.Copy(h, f)
		f.Close()
		out[name] = hex.EncodeToString(h.Sum(nil))
	}
	return out
}

func randHex(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// copyFile copies src to dst with mode and owner.
func copyFile(t testing.TB, src, dst string, mode os.FileMode, uid, gid int) {
	t.Helper()
	b, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dst, b, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(dst, uid, gid); err != nil {
		t.Fatal(err)
	}
	// After chown, which clears set-id bits; raw bits, since os.FileMode
	// spells setuid differently.
	if err := syscall.Chmod(dst, uint32(mode)); err != nil {
		t.Fatal(err)
	}
}

// kv parses the probe's "key=value" lines.
func kv(out string) map[string]string {
	m := map[string]string{}
	for _, line := range strings.Split(out, "\n") {
		if k, v, ok := strings.Cut(strings.TrimSpace(line), "="); ok {
			m[k] = v
		}
	}
	return m
}

// linesWith returns the fields of each line of out that starts with word.
func linesWith(out, word string) [][]string {
	var res [][]string
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		if len(f) > 0 && f[0] == word {
			res = append(res, f[1:])
		}
	}
	return res
}

// runHost runs the probe on the host (a control) and returns its output.
func runHost(t *testing.T, uid int, stdin string, args ...string) string {
	t.Helper()
	cmd := exec.CommandContext(t.Context(), args[0], args[1:]...)
	if uid != 0 {
		cmd.SysProcAttr = credential(uid)
	}
	if stdin != "" {
		cmd.Stdin = strings.NewReader(stdin)
	}
	var out bytes.Buffer
	cmd.Stdout = &out
	cmd.Stderr = io.Discard
	if err := cmd.Run(); err != nil {
		t.Logf("control %v: %v", args, err)
	}
	return out.String()
}
