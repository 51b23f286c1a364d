package manager

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/agentbox/agentbox/internal/anonmount"
	"github.com/agentbox/agentbox/internal/ids"
	"github.com/agentbox/agentbox/internal/sandbox"
)

// TestSandboxHostPaths: the run directory and the guest reach the sandbox
// on mounts that name no host path (SECURITY.md H45), which leave the host
// once the sandbox runs; and what a crash left mounted is detached at the
// next start, so that the directories it left are removed.
func TestSandboxHostPaths(t *testing.T) {
	h, _ := sandboxHarness(t)
	w := h.create(CreateRequest{Repo: h.repo.ID})
	res, out, _ := h.exec(w.ID, "cat", "/proc/self/mountinfo")
	if res.ExitCode != 0 {
		t.Fatalf("cat /proc/self/mountinfo: %+v", res)
	}
	gb := h.m.cfg.GuestBinary
	entries := map[string][]string{}
	for _, line := range strings.Split(out, "\n") {
		if f := strings.Fields(line); len(f) > 9 {
			entries[f[4]] = f
		}
		if strings.Contains(line, h.data) || strings.Contains(line, filepath.Dir(gb)) {
			t.Errorf("a host path shows inside: %s", line)
		}
	}
	// root, file system type, source
	for point, want := range map[string][3]string{
		sandbox.RunDir:    {"/", "tmpfs", anonmount.Source},
		sandbox.GuestPath: {"/" + filepath.Base(gb), "overlay", anonmount.Source},
	} {
		f := entries[point]
		if f == nil {
			t.Errorf("no mount at %s inside", point)
			continue
		}
		if got := [3]string{f[3], f[len(f)-3], f[len(f)-2]}; got != want {
			t.Errorf("%s inside: root, type and source %q, want %q", point, got, want)
		}
	}
	dir := h.m.sandboxDir(res.SandboxID)
	if left := mountsUnder(t, dir); len(left) > 0 {
		t.Errorf("mounts of a running sandbox left on the host: %q", left)
	}
	if _, err := os.Lstat(filepath.Join(dir, guestView)); !os.IsNotExist(err) {
		t.Errorf("the guest view's mount point is left: %v", err)
	}

	// A crash between the mounts and their detach, in a sandbox's and in
	// a pooled environment's directory.
	crashed := []string{h.m.sandboxDir(ids.New("sb")), filepath.Join(h.m.poolDir(), ids.New("sb"))}
	for _, d := range crashed {
		run := filepath.Join(d, "run")
		if err := os.MkdirAll(run, 0o700); err != nil {
			t.Fatal(err)
		}
		hid := h.m.hideHostPaths(t.Context(), d, run)
		// The run directory's tmpfs; the view and the tmpfs under it.
		if hid.guest == gb || len(mountsUnder(t, d)) != 3 {
			t.Fatalf("hideHostPaths(%s): guest %s, mounts %q", d, hid.guest, mountsUnder(t, d))
		}
		os.WriteFile(filepath.Join(run, "agentbox.sock"), nil, 0o600)
	}
	h.reopen()
	for _, d := range crashed {
		if left := mountsUnder(t, d); len(left) > 0 {
			t.Errorf("after a restart, mounts left in %s: %q", d, left)
		}
		if _, err := os.Lstat(d); !os.IsNotExist(err) {
			t.Errorf("after a restart, %s is left: %v", d, err)
		}
	}
	if res, _, _ := h.exec(w.ID, "true"); res.ExitCode != 0 {
		t.Errorf("exec after the restart: %+v", res)
	}
}

// TestWarmPoolHostPaths: a sandbox taken from the warm pool shows no host
// path in its mount table either: not its run directory's, the guest's,
// nor the pool point's that its workspace covers.
func TestWarmPoolHostPaths(t *testing.T) {
	h, _, rec := poolHarness(t, 1)
	waitReady(t, h, 1)
	w := h.create(CreateRequest{Repo: h.repo.ID})
	res, out, _ := h.exec(w.ID, "cat", "/proc/self/mountinfo")
	if res.ExitCode != 0 {
		t.Fatalf("cat /proc/self/mountinfo: %+v", res)
	}
	rec.pmu.Lock()
	claims := slices.Clone(rec.claims)
	rec.pmu.Unlock()
	if !slices.Equal(claims, []bool{true}) {
		t.Fatalf("pool claims %v, want one hit", claims)
	}
	workspace := 0
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		if len(f) > 4 && f[4] == sandbox.WorkspaceDir {
			workspace++
		}
		// The docker backend's binds are under /run/agentbox/docker,
		// which is on /run's tmpfs: a bind from there shows as
		// /agentbox/docker/...
		for _, p := range []string{h.data, filepath.Dir(h.m.cfg.GuestBinary), "/agentbox/docker/"} {
			if strings.Contains(line, p) {
				t.Errorf("host path %s shows inside: %s", p, line)
			}
		}
	}
	if workspace != 2 {
		t.Errorf("%d mounts at %s, want 2 (the pool point, the workspace over it):\n%s", workspace, sandbox.WorkspaceDir, out)
	}
}
