package anonmount

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/internal/mountinfo"
	"github.com/agentbox/agentbox/internal/sandbox/backendtest"
	"github.com/agentbox/agentbox/internal/testutil"
)

func needRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		backendtest.SkipOrFail(t, "mounting needs root")
	}
}

// entry returns the mountinfo fields of the mount at point, failing t if
// there is none.
func entry(t *testing.T, point string) []string {
	t.Helper()
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	var found []string
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) > 9 && mountinfo.Unescape(f[4]) == point {
			found = f
		}
	}
	if found == nil {
		t.Fatalf("no mount at %s in this process's mountinfo", point)
	}
	return found
}

// superOptions are the file system's options of a mountinfo entry.
func superOptions(f []string) string { return f[len(f)-1] }

// unchanged checks that this process's root and working directory are
// what they were.
func unchanged(t *testing.T, wd string) {
	t.Helper()
	if got, err := os.Getwd(); err != nil || got != wd {
		t.Errorf("working directory %q, %v; was %q", got, err, wd)
	}
	if root, err := os.Readlink("/proc/self/root"); err != nil || root != "/" {
		t.Errorf("/proc/self/root is %q, %v", root, err)
	}
}

func TestOverlay(t *testing.T) {
	needRoot(t)
	wd, _ := os.Getwd()
	// Commas and colons in the paths: they never reach the options.
	base := filepath.Join(t.TempDir(), "a,b:c")
	lower, dir := filepath.Join(base, "lower"), filepath.Join(base, "ws")
	for _, d := range []string{lower, filepath.Join(dir, "upper"), filepath.Join(dir, "work"), filepath.Join(dir, "merged")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	os.WriteFile(filepath.Join(lower, "f"), []byte("lower"), 0o644)
	merged := filepath.Join(dir, "merged")
	if err := Overlay(lower, dir, "upper", "work", "merged", unix.MS_NOSUID|unix.MS_NODEV, "index=off"); err != nil {
		t.Fatal(err)
	}
	defer testutil.Unmount(t, merged)
	unchanged(t, wd)
	f := entry(t, merged)
	if got, want := superOptions(f), "rw,lowerdir=/,upperdir=upper,workdir=work"; !strings.HasPrefix(got, want) {
		t.Errorf("overlay options %q, want them to start %q", got, want)
	}
	if f[3] != "/" || strings.Contains(strings.Join(f[5:], " "), base) {
		t.Errorf("the entry names a host path: %q", f)
	}
	if b, err := os.ReadFile(filepath.Join(merged, "f")); err != nil || string(b) != "lower" {
		t.Errorf("reading the lower layer through the mount: %q, %v", b, err)
	}
	if err := os.WriteFile(filepath.Join(merged, "g"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "upper", "g")); err != nil {
		t.Errorf("a write did not reach the upper layer: %v", err)
	}

	for _, bad := range []string{"", "..", "a/b", "a,b", "a:b"} {
		if err := Overlay(lower, dir, bad, "work", "merged", 0, ""); err == nil {
			t.Errorf("Overlay with upper %q: no error", bad)
		}
	}
}

func TestView(t *testing.T) {
	needRoot(t)
	wd, _ := os.Getwd()
	base := t.TempDir()
	src, target := filepath.Join(base, "bin"), filepath.Join(base, "view")
	os.Mkdir(src, 0o755)
	os.Mkdir(target, 0o700)
	os.WriteFile(filepath.Join(src, "prog"), []byte("#!/bin/sh\n"), 0o755)
	if err := View(target, src); err != nil {
		t.Fatal(err)
	}
	defer Detach(target)
	unchanged(t, wd)
	f := entry(t, target)
	if f[3] != "/" || f[len(f)-2] != Source || !strings.Contains(superOptions(f), "lowerdir=/:.") || strings.Contains(strings.Join(f[5:], " "), base) {
		t.Errorf("view entry %q", f)
	}
	if b, err := os.ReadFile(filepath.Join(target, "prog")); err != nil || string(b) != "#!/bin/sh\n" {
		t.Errorf("reading through the view: %q, %v", b, err)
	}
	if err := os.WriteFile(filepath.Join(target, "x"), nil, 0o644); !errors.Is(err, unix.EROFS) {
		t.Errorf("writing into the view: %v, want EROFS", err)
	}
	// A file bound from the view shows its name, nothing more.
	bound := filepath.Join(base, "bound")
	os.WriteFile(bound, nil, 0o644)
	if err := unix.Mount(filepath.Join(target, "prog"), bound, "", unix.MS_BIND, ""); err != nil {
		t.Fatal(err)
	}
	defer testutil.Unmount(t, bound)
	if f := entry(t, bound); f[3] != "/prog" {
		t.Errorf("bind of a file of the view: root %q, want /prog (%q)", f[3], f)
	}

	// A bind of the whole view outlives the view's leaving the host, its
	// mount point's removal included, and still lists.
	boundDir := filepath.Join(base, "bounddir")
	os.Mkdir(boundDir, 0o755)
	if err := unix.Mount(target, boundDir, "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
		t.Fatal(err)
	}
	defer testutil.Unmount(t, boundDir)
	if err := Detach(target); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(target); err != nil {
		t.Fatalf("removing the view's mount point after Detach: %v", err)
	}
	if names, err := os.ReadDir(boundDir); err != nil || len(names) != 1 || names[0].Name() != "prog" {
		t.Errorf("listing a bind of the view once it left the host: %v, %v", names, err)
	}
	if b, err := os.ReadFile(filepath.Join(boundDir, "prog")); err != nil || string(b) != "#!/bin/sh\n" {
		t.Errorf("reading through a bind of the view once it left the host: %q, %v", b, err)
	}
}

func TestTmpfs(t *testing.T) {
	needRoot(t)
	dir := filepath.Join(t.TempDir(), "run")
	os.Mkdir(dir, 0o700)
	os.Chown(dir, 1000, 1001)
	if err := Tmpfs(dir, 1<<20, 64); err != nil {
		t.Fatal(err)
	}
	var st unix.Stat_t
	if err := unix.Stat(dir, &st); err != nil {
		t.Fatal(err)
	}
	if st.Mode&0o7777 != 0o700 || st.Uid != 1000 || st.Gid != 1001 {
		t.Errorf("tmpfs root mode %#o owner %d:%d, want 0700 1000:1001", st.Mode&0o7777, st.Uid, st.Gid)
	}
	if f := entry(t, dir); f[3] != "/" || f[len(f)-2] != Source {
		t.Errorf("tmpfs entry %q", f)
	}
	if err := Detach(dir); err != nil {
		t.Fatal(err)
	}
	if err := Detach(dir); err != nil {
		t.Errorf("detaching what is not mounted: %v", err)
	}
	if ok, _ := mountinfo.IsMountPoint(dir); ok {
		t.Errorf("%s is still a mount point", dir)
	}
}

// TestPrivateThread runs many changes of root at once: none may reach
// another thread, the main thread in particular (it is /proc/self).
func TestPrivateThread(t *testing.T) {
	needRoot(t)
	wd, _ := os.Getwd()
	dir := t.TempDir()
	var wg sync.WaitGroup
	for range 200 {
		wg.Go(func() {
			err := OnPrivateThread(func() error {
				if unix.Gettid() == unix.Getpid() {
					return errors.New("on the main thread")
				}
				return unix.Chroot(dir)
			})
			if err != nil {
				t.Error(err)
			}
			unchanged(t, wd)
		})
	}
	wg.Wait()
	unchanged(t, wd)
}
