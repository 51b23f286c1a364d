package workspace

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/agentbox/agentbox/internal/mountinfo"
	"github.com/agentbox/agentbox/internal/testutil/skip"

	"github.com/google/go-cmp/cmp"
	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/internal/errdefs"
	"github.com/agentbox/agentbox/internal/repocache"
	"github.com/agentbox/agentbox/internal/store"
	"github.com/agentbox/agentbox/internal/testutil"
)

const testUID, testGID = 1000, 1000

func requireDriver(t *testing.T, driver string) {
	t.Helper()
	if _, err := exec.LookPath("git"); err != nil {
		skip.OrFail(t, "git is not installed")
	}
	if os.Geteuid() != 0 {
		skip.OrFail(t, "driver tests chown files to the sandbox user and mount overlays: run as root")
	}
	if driver == Overlay {
		if err := ProbeOverlay(t.TempDir()); err != nil {
			skip.OrFail(t, "overlay mounts do not work here: "+err.Error())
		}
	}
}

// fixture is a bare mirror of a small repository and, for overlay, a
// pristine checkout of its first commit.
type fixture struct {
	src    *testutil.Repo
	repo   store.Repo
	commit string
	lower  string
	// top holds every directory the test makes, for the mount check.
	top string
}

var srcFiles = map[string]string{
	"README.md":   "hello\n",
	"lib/a.go":    "package lib\n",
	"lib/b.go":    "package lib // b\n",
	"docs/x.txt":  "x\n",
	"docs/y/z.md": "z\n",
}

func newFixture(t *testing.T, driver string) *fixture {
	t.Helper()
	requireDriver(t, driver)
	fx := &fixture{top: t.TempDir()}
	fx.src = testutil.NewRepo(t, srcFiles)
	fx.commit = fx.src.Commits[0]
	mirror := filepath.Join(fx.top, "mirror.git")
	testutil.Git(t, "", "clone", "-q", "--bare", fx.src.Dir, mirror)
	fx.repo = store.Repo{ID: "repo_000000000001", URL: fx.src.Dir, Path: mirror}
	if driver == Overlay {
		fx.lower = filepath.Join(fx.top, "pristine")
		if err := repocache.CheckoutRepo(t.Context(), fx.repo, fx.commit, fx.lower, testUID, testGID); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		if left := mountsUnder(t, fx.top); len(left) > 0 {
			t.Errorf("mounts left under %s: %q", fx.top, left)
			for _, m := range left {
				unix.Unmount(m, unix.MNT_DETACH)
			}
		}
	})
	return fx
}

// create makes a workspace directory with d and removes it when the test
// ends.
func (fx *fixture) create(t *testing.T, d Driver, name string) string {
	t.Helper()
	dir := filepath.Join(fx.top, name)
	if err := os.Mkdir(dir, 0o711); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := Remove(t.Context(), d, dir); err != nil {
			t.Errorf("Remove(%s): %v", dir, err)
		}
	})
	if err := d.Create(t.Context(), dir, Source{Repo: fx.repo, Commit: fx.commit, Lower: fx.lower, UID: testUID, GID: testGID}); err != nil {
		t.Fatalf("Create: %v", err)
	}
	return dir
}

func TestDrivers(t *testing.T) {
	// Each driver runs the suite plain and with a disk quota, which moves
	// its layout into a volume of its own.
	for _, c := range []struct {
		name  string
		quota int64
	}{{Overlay, 0}, {Copy, 0}, {Overlay, 64 << 20}, {Copy, 64 << 20}} {
		sub := c.name
		if c.quota > 0 {
			sub += "+quota"
		}
		name := c.name
		t.Run(sub, func(t *testing.T) {
			requireDriver(t, name)
			d, err := New(name)
			if err != nil {
				t.Fatal(err)
			}
			d = WithQuota(d, c.quota, t.TempDir())
			if d.Name() != name {
				t.Fatalf("New(%q).Name() = %q", name, d.Name())
			}
			tests := []struct {
				name string
				run  func(t *testing.T, d Driver)
			}{
				{"Create", testDriverCreate},
				{"AttachDetach", testDriverAttachDetach},
				{"Fork", testDriverFork},
				{"RemoveBusy", testDriverRemoveBusy},
				{"RemoveMissing", testDriverRemoveMissing},
			}
			for _, tt := range tests {
				t.Run(tt.name, func(t *testing.T) {
					t.Parallel()
					tt.run(t, d)
				})
			}
		})
	}
}

func TestNewDriver(t *testing.T) {
	for _, name := range []string{"", "auto", "zfs", "Overlay"} {
		if _, err := New(name); !errors.Is(err, errdefs.ErrInvalid) {
			t.Errorf("New(%q) = %v, want ErrInvalid", name, err)
		}
	}
}

func readTree(t *testing.T, files string) map[string]string {
	t.Helper()
	got := map[string]string{}
	err := filepath.WalkDir(files, func(p string, e os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(files, p)
		if rel == ".git" {
			return filepath.SkipDir
		}
		if e.Type().IsRegular() {
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			got[rel] = string(b)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return got
}

func testDriverCreate(t *testing.T, d Driver) {
	fx := newFixture(t, d.Name())
	dir := fx.create(t, d, "ws")
	files := d.Files(dir)
	if diff := cmp.Diff(srcFiles, readTree(t, files)); diff != "" {
		t.Errorf("files (-want +got):\n%s", diff)
	}
	if ok, err := d.Attached(dir); err != nil || !ok {
		t.Errorf("Attached = %v, %v", ok, err)
	}
	if got, _ := IsMountPoint(files); got != (d.Name() == Overlay) {
		t.Errorf("IsMountPoint(files) = %v", got)
	}
	branch, commit, err := Head(files)
	if err != nil || branch != "" || commit != fx.commit {
		t.Errorf("Head = %q, %q, %v; want detached at %s", branch, commit, err, fx.commit)
	}
	for _, p := range []string{".", "README.md", "lib", ".git/index"} {
		st, err := os.Lstat(filepath.Join(files, p))
		if err != nil {
			t.Fatal(err)
		}
		if s := st.Sys().(*syscall.Stat_t); s.Uid != testUID || s.Gid != testGID {
			t.Errorf("%s owned by %d:%d", p, s.Uid, s.Gid)
		}
	}
	// A fresh clone's reflogs name the mirror's host path.
	if _, err := os.Lstat(filepath.Join(files, ".git", "logs")); !os.IsNotExist(err) {
		t.Errorf(".git/logs exists (err %v): it names the host's mirror path", err)
	}
	if _, err := os.Lstat(filepath.Join(files, ".git", "objects", "info", "alternates")); !os.IsNotExist(err) {
		t.Errorf("the workspace borrows objects through alternates (err %v)", err)
	}
	if d.Name() == Overlay {
		// The shared lower layer holds no host path either, so no
		// workspace needs a whiteout to hide one.
		if _, err := os.Lstat(filepath.Join(fx.lower, ".git", "logs")); !os.IsNotExist(err) {
			t.Errorf("the pristine checkout has .git/logs (err %v)", err)
		}
		if _, err := os.Lstat(filepath.Join(filesRoot(dir), "upper", ".git", "logs")); !os.IsNotExist(err) {
			t.Errorf("the upper layer has a .git/logs entry (err %v)", err)
		}
		if err := d.Create(t.Context(), filepath.Join(fx.top, "nolower"), Source{Repo: fx.repo, Commit: fx.commit}); !errors.Is(err, errdefs.ErrInvalid) {
			t.Errorf("overlay Create without a lower layer = %v, want ErrInvalid", err)
		}
	}
}

func testDriverAttachDetach(t *testing.T, d Driver) {
	ctx := t.Context()
	fx := newFixture(t, d.Name())
	dir := fx.create(t, d, "ws")
	files := d.Files(dir)
	if err := os.WriteFile(filepath.Join(files, "mine.txt"), []byte("mine\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(files, "lib", "b.go")); err != nil {
		t.Fatal(err)
	}
	if err := d.Detach(ctx, dir); err != nil {
		t.Fatal(err)
	}
	if err := d.Detach(ctx, dir); err != nil {
		t.Errorf("second Detach: %v", err)
	}
	ok, err := d.Attached(dir)
	if err != nil {
		t.Fatal(err)
	}
	if d.Name() == Overlay {
		if ok {
			t.Fatal("Attached after Detach")
		}
		if left, _ := os.ReadDir(files); len(left) != 0 {
			t.Errorf("the mount point holds %d entries after Detach", len(left))
		}
	}
	for range 2 { // Attach is a no-op when attached: never two mounts.
		if err := d.Attach(ctx, dir, fx.lower); err != nil {
			t.Fatal(err)
		}
	}
	if n := len(mountsUnder(t, files)); d.Name() == Overlay && n != 1 {
		t.Errorf("%d mounts at %s, want 1", n, files)
	}
	want := map[string]string{"mine.txt": "mine\n"}
	for p, c := range srcFiles {
		if p != "lib/b.go" {
			want[p] = c
		}
	}
	if diff := cmp.Diff(want, readTree(t, files)); diff != "" {
		t.Errorf("files after Detach and Attach (-want +got):\n%s", diff)
	}
	if d.Name() == Overlay {
		if err := d.Detach(ctx, dir); err != nil {
			t.Fatal(err)
		}
		if err := d.Attach(ctx, dir, filepath.Join(fx.top, "no-such-lower")); !errors.Is(err, errdefs.ErrUnavailable) {
			t.Errorf("Attach with a missing lower layer = %v, want ErrUnavailable", err)
		}
		if err := d.Attach(ctx, dir, fx.lower); err != nil {
			t.Fatal(err)
		}
	}
}

func testDriverFork(t *testing.T, d Driver) {
	ctx := t.Context()
	fx := newFixture(t, d.Name())
	parent := fx.create(t, d, "parent")
	pf := d.Files(parent)
	mustWrite(t, filepath.Join(pf, "lib", "a.go"), "package lib // changed\n")
	mustWrite(t, filepath.Join(pf, "new", "n.txt"), "new\n")
	if err := os.RemoveAll(filepath.Join(pf, "docs")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("../README.md", filepath.Join(pf, "new", "link")); err != nil {
		t.Fatal(err)
	}
	child := filepath.Join(fx.top, "child")
	if err := os.Mkdir(child, 0o711); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := Remove(t.Context(), d, child); err != nil {
			t.Errorf("Remove(child): %v", err)
		}
	})
	if err := d.Fork(ctx, parent, child, Source{Lower: fx.lower, UID: testUID, GID: testGID}); err != nil {
		t.Fatal(err)
	}
	cf := d.Files(child)
	want := map[string]string{"README.md": "hello\n", "lib/a.go": "package lib // changed\n", "lib/b.go": "package lib // b\n", "new/n.txt": "new\n"}
	if diff := cmp.Diff(want, readTree(t, cf)); diff != "" {
		t.Errorf("fork files (-want +got):\n%s", diff)
	}
	if target, err := os.Readlink(filepath.Join(cf, "new", "link")); err != nil || target != "../README.md" {
		t.Errorf("fork symlink = %q, %v", target, err)
	}
	if _, commit, err := Head(cf); err != nil || commit != fx.commit {
		t.Errorf("fork Head = %q, %v", commit, err)
	}
	checkIndependent(t, pf, cf)
	// The fork survives its parent.
	if err := Remove(ctx, d, parent); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(cf, "lib", "a.go")); err != nil || string(b) != "package lib // changed\n" {
		t.Errorf("fork after the parent's removal: %q, %v", b, err)
	}
}

// checkIndependent writes child.txt in the fork's files cf and parent.txt
// in the parent's pf, and checks that neither shows in the other.
func checkIndependent(t *testing.T, pf, cf string) {
	t.Helper()
	mustWrite(t, filepath.Join(cf, "child.txt"), "c\n")
	mustWrite(t, filepath.Join(pf, "parent.txt"), "p\n")
	if _, err := os.Lstat(filepath.Join(pf, "child.txt")); !os.IsNotExist(err) {
		t.Errorf("the child's file is in the parent: %v", err)
	}
	if _, err := os.Lstat(filepath.Join(cf, "parent.txt")); !os.IsNotExist(err) {
		t.Errorf("the parent's later file is in the child: %v", err)
	}
}

func testDriverRemoveBusy(t *testing.T, d Driver) {
	fx := newFixture(t, d.Name())
	dir := fx.create(t, d, "ws")
	// An open file keeps an overlay busy; Remove detaches it lazily.
	f, err := os.Open(filepath.Join(d.Files(dir), "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := Remove(t.Context(), d, dir); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(dir); !os.IsNotExist(err) {
		t.Errorf("dir after Remove: %v", err)
	}
	if left := mountsUnder(t, dir); len(left) != 0 {
		t.Errorf("mounts after Remove: %q", left)
	}
}

func testDriverRemoveMissing(t *testing.T, d Driver) {
	fx := newFixture(t, d.Name())
	if err := Remove(t.Context(), d, filepath.Join(fx.top, "never-made")); err != nil {
		t.Errorf("Remove of a missing dir = %v", err)
	}
}

// TestOverlayNamesNoHostPath: a sandbox reads its mount table, so a
// workspace overlay's entry names its layers without their host paths
// (SECURITY.md H45), also after it is mounted again; and a directory whose
// path holds the ',' and ':' of overlay's option syntax serves as well.
func TestOverlayNamesNoHostPath(t *testing.T) {
	for _, quota := range []int64{0, 64 << 20} {
		fx := newFixture(t, Overlay)
		d := WithQuota(overlayDriver{}, quota, t.TempDir())
		dir := fx.create(t, d, "ws,a:b")
		for range 2 {
			files := d.Files(dir)
			f := mountEntry(t, files)
			if want := "rw,lowerdir=/,upperdir=upper,workdir=work"; !strings.HasPrefix(f[len(f)-1], want) || f[3] != "/" {
				t.Errorf("quota %d: overlay entry %q, want root / and options starting %q", quota, f, want)
			}
			if line := strings.Join(f, " "); strings.Contains(strings.Join(f[5:], " "), filepath.Dir(fx.top)) {
				t.Errorf("quota %d: the overlay entry names a host path: %s", quota, line)
			}
			if diff := cmp.Diff(srcFiles, readTree(t, files)); diff != "" {
				t.Errorf("quota %d: files (-want +got):\n%s", quota, diff)
			}
			if err := d.Detach(t.Context(), dir); err != nil {
				t.Fatal(err)
			}
			if err := d.Attach(t.Context(), dir, fx.lower); err != nil {
				t.Fatalf("quota %d: attaching again: %v", quota, err)
			}
		}
	}
}

// mountEntry returns the fields of the mountinfo entry of the mount at
// point.
func mountEntry(t *testing.T, point string) []string {
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
		t.Fatalf("no mount at %s", point)
	}
	return found
}

func TestIsMountPoint(t *testing.T) {
	requireDriver(t, Overlay)
	if ok, err := IsMountPoint("/"); err != nil || !ok {
		t.Errorf("IsMountPoint(/) = %v, %v", ok, err)
	}
	dir := filepath.Join(t.TempDir(), "with space")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if ok, err := IsMountPoint(dir); err != nil || ok {
		t.Errorf("IsMountPoint(plain dir) = %v, %v", ok, err)
	}
	if err := unix.Mount("tmpfs", dir, "tmpfs", 0, "size=1m"); err != nil {
		t.Fatal(err)
	}
	defer unix.Unmount(dir, unix.MNT_DETACH)
	if ok, err := IsMountPoint(dir + "/"); err != nil || !ok {
		t.Errorf("IsMountPoint(mounted dir with a space) = %v, %v", ok, err)
	}
}

func mustWrite(t *testing.T, p, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// mountsUnder lists the mount points at or below dir.
func mountsUnder(t *testing.T, dir string) []string {
	t.Helper()
	out, err := mountinfo.Under(dir)
	if err != nil {
		t.Fatal(err)
	}
	return out
}
