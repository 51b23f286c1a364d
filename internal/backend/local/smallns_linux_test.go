package local

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
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
	isSmall, small := spawnerIsSmall(t, b)
	t.Logf("mounts: %d in the daemon's namespace, %d in the spawner's", strings.Count(string(host), "\n"), strings.Count(small, "\n"))
	if !isSmall {
		t.Errorf("the spawner's root is not its own tmpfs:\n%s", small)
	}
	if !strings.Contains(small, " "+b.stageDir+" ") {
		t.Errorf("the stage %s is not in the spawner's namespace:\n%s", b.stageDir, small)
	}
	for _, line := range strings.Split(small, "\n") {
		if smallRoot(line) {
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

// TestSpawnerNamespaceFallback checks that a bubblewrap which cannot start
// a jail from the small namespace (here a wrapper that needs a file beside
// it, which that namespace does not hold, though it answers --version
// without one) is started from the daemon's own.
func TestSpawnerNamespaceFallback(t *testing.T) {
	t.Parallel()
	requireJails(t)
	wrapper := fallbackBwrap(t)
	b := backendWithBwrap(t, wrapper)
	if small, mounts := spawnerIsSmall(t, b); small {
		t.Errorf("the spawner stayed in a small namespace that cannot start %s:\n%s", wrapper, mounts)
	}
	x := startBox(t, b, sandbox.Spec{})
	if got := x.mustSh(t, "echo ok"); strings.TrimSpace(got) != "ok" {
		t.Errorf("command in a sandbox: %q", got)
	}
}

// fallbackBwrap is a bubblewrap wrapper that cannot start a jail from
// the small namespace: it needs a file beside it, which that namespace
// does not hold, though it answers --version without one.
func fallbackBwrap(t *testing.T) string {
	t.Helper()
	dir := bwrapDir(t)
	real, err := exec.LookPath("bwrap")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "env.sh"), []byte("BWRAP="+real+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	wrapper := filepath.Join(dir, "bwrap")
	script := "#!/bin/sh\n[ \"$1\" = --version ] && exec " + real + " --version\n" +
		". \"$(dirname \"$0\")/env.sh\" || exit 1\nexec \"$BWRAP\" \"$@\"\n"
	if err := os.WriteFile(wrapper, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return wrapper
}

// TestSpawnerNamespaceBwrapUnderTmp: a bubblewrap installed under /tmp is
// bound into the small namespace on the way bubblewrap's own /tmp is made,
// and that namespace is still used.
func TestSpawnerNamespaceBwrapUnderTmp(t *testing.T) {
	t.Parallel()
	requireJails(t)
	dir := bwrapDir(t)
	real, err := exec.LookPath("bwrap")
	if err != nil {
		t.Fatal(err)
	}
	bin, err := os.ReadFile(real)
	if err != nil {
		t.Fatal(err)
	}
	copied := filepath.Join(dir, "bwrap")
	if err := os.WriteFile(copied, bin, 0o755); err != nil {
		t.Fatal(err)
	}
	b := backendWithBwrap(t, copied)
	if small, mounts := spawnerIsSmall(t, b); !small {
		t.Errorf("a bwrap at %s was started from the daemon's namespace:\n%s", copied, mounts)
	}
	x := startBox(t, b, sandbox.Spec{})
	if got := x.mustSh(t, "echo ok"); strings.TrimSpace(got) != "ok" {
		t.Errorf("command in a sandbox: %q", got)
	}
}

// bwrapDir is a temporary directory for a bwrap binary or wrapper, which
// bubblewrap reaches as the sandbox user: every directory on the way must
// let it through.
func bwrapDir(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	for _, d := range []string{filepath.Dir(dir), dir} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// backendWithBwrap is a backend of its own that runs bwrap.
func backendWithBwrap(t *testing.T, bwrap string) *Backend {
	t.Helper()
	return newBackendWith(t, Options{
		StateDir:     filepath.Join(t.TempDir(), "state"),
		ImagesDir:    imagesDir,
		CgroupParent: "agentbox-test-" + randHex(4),
		Bwrap:        bwrap,
	})
}

// spawnerIsSmall reports whether b's spawner thread is in the small
// namespace: its root is the spawner's own tmpfs. It also returns the
// thread's mount table, for messages.
func spawnerIsSmall(t *testing.T, b *Backend) (bool, string) {
	t.Helper()
	mine, err := os.ReadFile("/proc/self/task/" + strconv.Itoa(b.sp.tid) + "/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	return slices.ContainsFunc(strings.Split(string(mine), "\n"), smallRoot), string(mine)
}

// smallRoot reports whether a mountinfo line is the small namespace's
// root: the spawner's own tmpfs, mounted at /.
func smallRoot(line string) bool {
	f := strings.Fields(line)
	return len(f) > 4 && f[4] == "/" && strings.Contains(line, " - tmpfs agentbox-spawner ")
}
