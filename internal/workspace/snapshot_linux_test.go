package workspace

import (
	"errors"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"testing"

	"github.com/google/go-cmp/cmp"
	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/internal/testutil/skip"
)

// fsck checks the ext4 image of the workspace at dir, whose volume must
// be unmounted, and fails t unless it is clean.
func fsck(t *testing.T, dir string) {
	t.Helper()
	if _, err := exec.LookPath("e2fsck"); err != nil {
		skip.OrFail(t, "e2fsck is not installed")
	}
	out, err := exec.Command("e2fsck", "-fn", VolumeImage(dir)).CombinedOutput()
	if err != nil {
		t.Errorf("e2fsck -fn %s: %v\n%s", VolumeImage(dir), err, out)
	}
}

// allocatedIn is how many bytes of the file p hold data within r.
func allocatedIn(t *testing.T, p string, r span) int64 {
	t.Helper()
	f, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var n int64
	for off := r.off; off < r.end; {
		data, err := unix.Seek(int(f.Fd()), off, unix.SEEK_DATA)
		if errors.Is(err, unix.ENXIO) || (err == nil && data >= r.end) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		hole, err := unix.Seek(int(f.Fd()), data, unix.SEEK_HOLE)
		if err != nil {
			t.Fatal(err)
		}
		n += min(hole, r.end) - data
		off = hole
	}
	return n
}

// freeze freezes the volume of the workspace at dir and leaves it frozen
// once its descriptor is closed, as a daemon that dies mid-fork does.
func freeze(t *testing.T, dir string) {
	t.Helper()
	fd, err := openVolume(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	if err := unix.IoctlSetInt(fd, ioctlFreeze, 0); err != nil {
		t.Fatal(err)
	}
}

// frozen runs fn with the volume of the workspace at dir frozen.
func frozen(t *testing.T, dir string, fn func()) {
	t.Helper()
	freeze(t, dir)
	defer Thaw(dir)
	fn()
}

// TestForkSnapshot: a fork of a workspace with a quota volume is a copy
// of its image, taken frozen. It holds the parent's changes (whiteouts,
// links, modes, owners), its own branch, a clean file system, and none of
// the journal's body, however much of it the parent had written.
func TestForkSnapshot(t *testing.T) {
	for _, name := range []string{Overlay, Copy} {
		t.Run(name, func(t *testing.T) {
			inner, _ := New(name)
			d := WithQuota(inner, 64<<20, t.TempDir())
			fx := newFixture(t, name)
			parent := fx.create(t, d, "parent")
			pf := d.Files(parent)
			mustWrite(t, filepath.Join(pf, "lib", "a.go"), "package lib // changed\n")
			if err := os.RemoveAll(filepath.Join(pf, "docs")); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink("../README.md", filepath.Join(pf, "lib", "link")); err != nil {
				t.Fatal(err)
			}
			if err := os.Chmod(filepath.Join(pf, "lib", "b.go"), 0o600); err != nil {
				t.Fatal(err)
			}
			// Enough files for a snapshot (snapshotMinFiles).
			many := map[string]string{}
			for i := range snapshotMinFiles {
				many[fmt.Sprintf("many/%d", i)] = strconv.Itoa(i)
			}
			for p, c := range many {
				mustWrite(t, filepath.Join(pf, p), c)
			}
			// Churn: many small synced transactions fill the journal,
			// which a long-lived workspace's volume has written over.
			churn := filepath.Join(pf, "churn")
			if err := os.Mkdir(churn, 0o755); err != nil {
				t.Fatal(err)
			}
			for i := range 400 {
				p := filepath.Join(churn, strconv.Itoa(i%20))
				f, err := os.Create(p)
				if err != nil {
					t.Fatal(err)
				}
				f.WriteString(p)
				f.Sync()
				f.Close()
			}
			if err := os.RemoveAll(churn); err != nil {
				t.Fatal(err)
			}
			var journal []span
			frozen(t, parent, func() {
				var err error
				if journal, err = emptyJournal(VolumeImage(parent)); err != nil || len(journal) == 0 {
					t.Fatalf("emptyJournal of a frozen volume = %v, %v; want its journal's body", journal, err)
				}
			})
			var used int64
			for _, r := range journal {
				used += allocatedIn(t, VolumeImage(parent), r)
			}
			if used < 1<<20 {
				t.Fatalf("the parent's journal holds %d bytes: the churn did not reach it", used)
			}

			child := filepath.Join(fx.top, "child")
			if err := os.Mkdir(child, 0o711); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { Remove(t.Context(), d, child) })
			if err := d.Fork(t.Context(), parent, child, Source{Lower: fx.lower, Branch: "fork", Commit: fx.commit, UID: testUID, GID: testGID}); err != nil {
				t.Fatal(err)
			}
			// A byte copy: every file kept its inode (a copy file by
			// file allocates new ones, in another order).
			raw := func(dir, rel string) uint64 {
				layer := "tree"
				if name == Overlay {
					layer = "upper"
				}
				var st unix.Stat_t
				if err := unix.Lstat(filepath.Join(dir, volumeMount, layer, rel), &st); err != nil {
					t.Fatal(err)
				}
				return st.Ino
			}
			for p := range many {
				if pi, ci := raw(parent, p), raw(child, p); pi != ci {
					t.Fatalf("%s is inode %d in the parent, %d in the fork: not a snapshot", p, pi, ci)
				}
			}
			// The fork has written its own few transactions since (its
			// branch), and nothing of the parent's.
			var childUsed int64
			for _, r := range journal {
				childUsed += allocatedIn(t, VolumeImage(child), r)
			}
			if childUsed > 256<<10 {
				t.Errorf("the fork's journal holds %d bytes (the parent's %d): the parent's was copied", childUsed, used)
			}
			cf := d.Files(child)
			want := map[string]string{"README.md": "hello\n", "lib/a.go": "package lib // changed\n", "lib/b.go": "package lib // b\n"}
			maps.Copy(want, many)
			if diff := cmp.Diff(want, readTree(t, cf)); diff != "" {
				t.Errorf("fork files (-want +got):\n%s", diff)
			}
			if target, err := os.Readlink(filepath.Join(cf, "lib", "link")); err != nil || target != "../README.md" {
				t.Errorf("fork symlink = %q, %v", target, err)
			}
			if st, err := os.Stat(filepath.Join(cf, "lib", "b.go")); err != nil || st.Mode().Perm() != 0o600 || st.Sys().(*syscall.Stat_t).Uid != testUID {
				t.Errorf("fork lib/b.go: %v, %v", st.Mode(), err)
			}
			if branch, commit, err := Head(cf); err != nil || branch != "fork" || commit != fx.commit {
				t.Errorf("fork Head = %q %q, %v", branch, commit, err)
			}
			// Independent both ways.
			checkIndependent(t, pf, cf)
			// Both file systems are sound once unmounted.
			for _, dir := range []string{parent, child} {
				if err := d.Detach(t.Context(), dir); err != nil {
					t.Fatal(err)
				}
				fsck(t, dir)
			}
			if err := d.Attach(t.Context(), child, fx.lower); err != nil {
				t.Fatal(err)
			}
			if b, err := os.ReadFile(filepath.Join(cf, "child.txt")); err != nil || string(b) != "c\n" {
				t.Errorf("the fork after a remount: %q, %v", b, err)
			}
		})
	}
}

// TestForkUnderWriter forks a workspace while a writer in it creates
// files without pause. Each fork is one instant of the parent: the files
// it holds are 0..n-1, each whole, and at most file n begun; its file
// system is clean; and the writer goes on after each.
func TestForkUnderWriter(t *testing.T) {
	d := WithQuota(overlayDriver{}, 64<<20, t.TempDir())
	fx := newFixture(t, Overlay)
	parent := fx.create(t, d, "parent")
	out := filepath.Join(d.Files(parent), "out")
	if err := os.Mkdir(out, 0o755); err != nil {
		t.Fatal(err)
	}
	content := func(i int) string { return fmt.Sprintf("file %d %0512d\n", i, i) }
	// Enough files for a snapshot from the first fork (snapshotMinFiles).
	before := snapshotMinFiles
	for i := range before {
		mustWrite(t, filepath.Join(out, strconv.Itoa(i)), content(i))
	}
	stop := make(chan struct{})
	written := make(chan int)
	go func() {
		i := before
		defer func() { written <- i }()
		for ; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			f, err := os.Create(filepath.Join(out, strconv.Itoa(i)))
			if err != nil {
				t.Error(err)
				return
			}
			f.WriteString(content(i))
			f.Close()
		}
	}()
	var children []string
	for k := range 5 {
		child := filepath.Join(fx.top, fmt.Sprint("child", k))
		if err := os.Mkdir(child, 0o711); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { Remove(t.Context(), d, child) })
		if err := d.Fork(t.Context(), parent, child, Source{Lower: fx.lower, UID: testUID, GID: testGID}); err != nil {
			close(stop)
			<-written
			t.Fatal(err)
		}
		children = append(children, child)
	}
	close(stop)
	total := <-written
	if total == before {
		t.Fatal("the writer wrote nothing")
	}
	for _, child := range children {
		entries, err := os.ReadDir(filepath.Join(d.Files(child), "out"))
		if err != nil {
			t.Fatal(err)
		}
		n := len(entries)
		for i := range n {
			b, err := os.ReadFile(filepath.Join(d.Files(child), "out", strconv.Itoa(i)))
			if err != nil {
				t.Fatalf("%s holds %d files but not file %d: %v", child, n, i, err)
			}
			if string(b) != content(i) && !(i == n-1 && len(b) == 0) {
				t.Errorf("%s: file %d of %d is %q", child, i, n, b)
			}
		}
		if err := d.Detach(t.Context(), child); err != nil {
			t.Fatal(err)
		}
		fsck(t, child)
		t.Logf("%s: %d of the writer's %d files", filepath.Base(child), n, total)
	}
}

// TestThaw: a volume left frozen (a daemon that died mid-fork) is thawed
// by Thaw, which says so once; its writers go on.
func TestThaw(t *testing.T) {
	d := WithQuota(overlayDriver{}, 16<<20, t.TempDir())
	fx := newFixture(t, Overlay)
	dir := fx.create(t, d, "ws")
	if did, err := Thaw(dir); err != nil || did {
		t.Fatalf("Thaw of a live volume = %v, %v", did, err)
	}
	freeze(t, dir)
	var wg sync.WaitGroup
	wg.Go(func() { mustWrite(t, filepath.Join(d.Files(dir), "after.txt"), "after\n") })
	if did, err := Thaw(dir); err != nil || !did {
		t.Fatalf("Thaw of a frozen volume = %v, %v", did, err)
	}
	wg.Wait()
	if did, err := Thaw(dir); err != nil || did {
		t.Errorf("a second Thaw = %v, %v", did, err)
	}
	if b, err := os.ReadFile(filepath.Join(d.Files(dir), "after.txt")); err != nil || string(b) != "after\n" {
		t.Errorf("the write held by the freeze: %q, %v", b, err)
	}
	// Without a quota there is nothing to thaw.
	plain := fx.create(t, overlayDriver{}, "plain")
	if did, err := Thaw(plain); err != nil || did {
		t.Errorf("Thaw without a volume = %v, %v", did, err)
	}
}

// TestEmptyJournal: the journal's body is skipped only when the image's
// own journal says it is empty; a live volume's is not.
func TestEmptyJournal(t *testing.T) {
	d := WithQuota(overlayDriver{}, 16<<20, t.TempDir())
	fx := newFixture(t, Overlay)
	dir := fx.create(t, d, "ws")
	f, err := os.Create(filepath.Join(d.Files(dir), "synced"))
	if err != nil {
		t.Fatal(err)
	}
	f.WriteString("x")
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	f.Close()
	if spans, err := emptyJournal(VolumeImage(dir)); err != nil || spans != nil {
		t.Errorf("emptyJournal of a live volume after a commit = %v, %v; want nothing skipped", spans, err)
	}
	frozen(t, dir, func() {
		spans, err := emptyJournal(VolumeImage(dir))
		if err != nil || len(spans) == 0 {
			t.Errorf("emptyJournal of a frozen volume = %v, %v", spans, err)
		}
	})
	// Not ext4 at all: nothing skipped, no error.
	junk := filepath.Join(t.TempDir(), "junk")
	if err := os.WriteFile(junk, make([]byte, 4096), 0o600); err != nil {
		t.Fatal(err)
	}
	if spans, err := emptyJournal(junk); err != nil || spans != nil {
		t.Errorf("emptyJournal of zeros = %v, %v", spans, err)
	}
}

func TestWithout(t *testing.T) {
	for _, tt := range []struct {
		r    span
		skip []span
		want []span
	}{
		{span{0, 100}, nil, []span{{0, 100}}},
		{span{0, 100}, []span{{10, 20}, {50, 60}}, []span{{0, 10}, {20, 50}, {60, 100}}},
		{span{0, 100}, []span{{0, 100}}, nil},
		{span{10, 20}, []span{{0, 15}}, []span{{15, 20}}},
		{span{10, 20}, []span{{15, 30}}, []span{{10, 15}}},
		{span{10, 20}, []span{{0, 5}, {25, 30}}, []span{{10, 20}}},
	} {
		if got := without(tt.r, tt.skip); !cmp.Equal(got, tt.want, cmp.AllowUnexported(span{})) {
			t.Errorf("without(%v, %v) = %v, want %v", tt.r, tt.skip, got, tt.want)
		}
	}
}

// TestQuietSnapshot: a parent that takes no write is copied without a
// freeze, and the copy is the whole file system, sound; a write that
// reaches the device during the attempt makes it give up (the caller then
// freezes), leaving nothing behind, and the fork still holds it.
func TestQuietSnapshot(t *testing.T) {
	if os.Geteuid() != 0 {
		skip.OrFail(t, "loop devices and mounts need root")
	}
	templates := t.TempDir()
	parent := t.TempDir()
	if err := makeVolume(t.Context(), parent, templates, 64<<20); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unmountVolume(parent) })
	want := map[string]string{}
	for i := range 200 {
		p := fmt.Sprintf("d%d/f%d", i%10, i)
		want[p] = strconv.Itoa(i)
		mustWrite(t, filepath.Join(parent, volumeMount, p), want[p])
	}
	fd, err := openVolume(parent)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	// child makes a directory for a copy; check mounts the copy there
	// and checks its files, then a clean file system once unmounted.
	child := func(name string) string {
		dir := filepath.Join(t.TempDir(), name)
		if err := os.Mkdir(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		return dir
	}
	check := func(dir string, want map[string]string) {
		t.Helper()
		mnt := filepath.Join(dir, volumeMount)
		if err := os.Mkdir(mnt, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := mountImage(VolumeImage(dir), mnt, true); err != nil {
			t.Fatal(err)
		}
		got := readTree(t, mnt)
		delete(got, "lost+found")
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("the copy's files (-want +got):\n%s", diff)
		}
		if err := unmountVolume(dir); err != nil {
			t.Fatal(err)
		}
		fsck(t, dir)
	}

	idle := child("idle")
	ok, err := quietSnapshot(fd, VolumeImage(parent), VolumeImage(idle))
	if err != nil || !ok {
		t.Fatalf("quietSnapshot of an idle volume = %v, %v; want a copy without a freeze", ok, err)
	}
	check(idle, want)

	// A write that reaches the device between the two looks, its journal
	// emptied again after it: only the device's counters tell.
	busy := child("busy")
	quietHook = func() {
		mustWrite(t, filepath.Join(parent, volumeMount, "late"), "late")
		if err := unix.Syncfs(fd); err != nil {
			t.Error(err)
		}
		if err := unix.IoctlSetPointerInt(fd, ioctlCheckpoint, 0); err != nil {
			t.Error(err)
		}
	}
	t.Cleanup(func() { quietHook = nil })
	ok, err = quietSnapshot(fd, VolumeImage(parent), VolumeImage(busy))
	if err != nil || ok {
		t.Fatalf("quietSnapshot of a volume written meanwhile = %v, %v; want false", ok, err)
	}
	if _, err := os.Lstat(VolumeImage(busy)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a quiet snapshot given up left its copy: %v", err)
	}
	// snapshotVolume then freezes; the write is in the copy.
	quietHook = nil
	if err := snapshotVolume(parent, VolumeImage(busy)); err != nil {
		t.Fatal(err)
	}
	want["late"] = "late"
	check(busy, want)
}
