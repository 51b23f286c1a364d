package diskusage

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/internal/testutil/skip"
)

// allocated is what the file system says path takes.
func allocated(t *testing.T, path string) int64 {
	t.Helper()
	var st syscall.Stat_t
	if err := syscall.Lstat(path, &st); err != nil {
		t.Fatal(err)
	}
	return st.Blocks * 512
}

func write(t *testing.T, path string, n int) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, make([]byte, n), 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestTreeCountsHardLinksOnceAndSparseFilesByBlocks(t *testing.T) {
	dir := t.TempDir()
	write(t, filepath.Join(dir, "a", "big"), 1<<20)
	if err := os.Link(filepath.Join(dir, "a", "big"), filepath.Join(dir, "b-link")); err != nil {
		t.Fatal(err)
	}
	// A 1 GiB sparse image holding 64 KiB: only the 64 KiB count.
	img, err := os.Create(filepath.Join(dir, "ws.img"))
	if err != nil {
		t.Fatal(err)
	}
	img.WriteAt(make([]byte, 64<<10), 0)
	img.Truncate(1 << 30)
	img.Close()

	want := allocated(t, dir) + allocated(t, filepath.Join(dir, "a")) + allocated(t, filepath.Join(dir, "a", "big")) + allocated(t, filepath.Join(dir, "ws.img"))
	got, err := Tree(dir)
	if err != nil {
		t.Fatal(err)
	}
	if got != want {
		t.Errorf("Tree = %d, want %d (the hard link once, the image by its blocks)", got, want)
	}
	if got > 4<<20 {
		t.Errorf("Tree = %d: the sparse image counted by its apparent size", got)
	}
	u, err := Measure(dir)
	if err != nil || u.Bytes != want || u.Method != MethodWalk {
		t.Errorf("Measure = %+v, %v; want %d by walk", u, err, want)
	}
}

func TestExclusiveCountsOnlyWhatRemovalFrees(t *testing.T) {
	dir := t.TempDir()
	mirror, checkout := filepath.Join(dir, "mirror"), filepath.Join(dir, "checkout")
	write(t, filepath.Join(mirror, "obj"), 256<<10)
	write(t, filepath.Join(checkout, "own"), 128<<10)
	if err := os.Link(filepath.Join(mirror, "obj"), filepath.Join(checkout, "obj")); err != nil {
		t.Fatal(err)
	}
	own := allocated(t, checkout) + allocated(t, filepath.Join(checkout, "own"))
	if got, err := Exclusive(checkout); err != nil || got != own {
		t.Errorf("Exclusive(checkout) = %d, %v; want %d (the object shared with the mirror frees nothing)", got, err, own)
	}
	all, _ := Tree(dir)
	both, err := Exclusive(mirror, checkout, filepath.Join(dir, "missing"))
	if err != nil || both != all-allocated(t, dir) {
		t.Errorf("Exclusive(mirror, checkout) = %d, %v; want %d", both, err, all-allocated(t, dir))
	}
}

func TestTreeSkipsMounts(t *testing.T) {
	if os.Geteuid() != 0 {
		skip.OrFail(t, "mounting a tmpfs needs root")
	}
	dir := t.TempDir()
	mnt := filepath.Join(dir, "ws", "merged")
	if err := os.MkdirAll(mnt, 0o755); err != nil {
		t.Fatal(err)
	}
	before, err := Tree(dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount("tmpfs", mnt, "tmpfs", 0, "size=8m"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Unmount(mnt, unix.MNT_DETACH) })
	write(t, filepath.Join(mnt, "inside"), 2<<20)
	after, err := Tree(dir)
	if err != nil {
		t.Fatal(err)
	}
	if after > before || after >= 2<<20 {
		t.Errorf("Tree with a tmpfs mounted inside = %d, before %d: the walk descended into the mount", after, before)
	}
	// The mount's own file system is measured by statfs.
	u, err := Measure(mnt)
	if err != nil || u.Method != MethodStatfs || u.Bytes < 2<<20 {
		t.Errorf("Measure(mount point) = %+v, %v; want statfs with at least 2 MiB", u, err)
	}
}
