package workspace

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/internal/testutil/skip"
)

// TestCopyTreeFidelity: what overlayfs and git rely on survives a copy,
// and hostile content (huge sparse files, links out) is copied as is,
// never followed or inflated.
func TestCopyTreeFidelity(t *testing.T) {
	if os.Geteuid() != 0 {
		skip.OrFail(t, "this needs root for trusted.* attributes and device nodes")
	}
	src, dst := filepath.Join(t.TempDir(), "src"), filepath.Join(t.TempDir(), "dst")
	os.MkdirAll(filepath.Join(src, "d", "e"), 0o750)
	os.WriteFile(filepath.Join(src, "d", "f.txt"), []byte("hello"), 0o640)
	os.Chown(filepath.Join(src, "d", "f.txt"), 1000, 1001)
	unix.Setxattr(filepath.Join(src, "d"), "trusted.overlay.opaque", []byte("y"), 0)
	unix.Mknod(filepath.Join(src, "whiteout"), unix.S_IFCHR, 0)
	os.Symlink("/etc/passwd", filepath.Join(src, "link-out"))
	os.Link(filepath.Join(src, "d", "f.txt"), filepath.Join(src, "hard"))
	unix.Mkfifo(filepath.Join(src, "fifo"), 0o600)
	sparse, _ := os.Create(filepath.Join(src, "sparse"))
	sparse.WriteAt([]byte("tail"), 10<<30) // 10 GiB apparent, a few KiB real
	sparse.Close()
	// A hole in the middle of data, and a file larger than the copy's
	// buffer.
	holed, _ := os.Create(filepath.Join(src, "holed"))
	holed.WriteAt([]byte("head"), 0)
	holed.WriteAt([]byte("tail"), 8<<20)
	holed.Close()
	big := bytes.Repeat([]byte("0123456789abcdef"), 40<<10) // 640 KiB
	os.WriteFile(filepath.Join(src, "big"), big, 0o644)
	// Owner before mode: a chown after the chmod would clear set-user-ID.
	os.WriteFile(filepath.Join(src, "suid"), []byte("x"), 0o755)
	os.Chown(filepath.Join(src, "suid"), 1000, 1000)
	unix.Chmod(filepath.Join(src, "suid"), 0o4755)
	mtime := time.Date(2001, 2, 3, 4, 5, 6, 7000, time.UTC)
	os.Chtimes(filepath.Join(src, "d", "f.txt"), mtime, mtime)

	if err := copyTree(t.Context(), src, dst); err != nil {
		t.Fatal(err)
	}
	var st unix.Stat_t
	unix.Lstat(filepath.Join(dst, "d", "f.txt"), &st)
	if st.Uid != 1000 || st.Gid != 1001 || st.Mode&0o777 != 0o640 {
		t.Errorf("f.txt owner %d:%d mode %o", st.Uid, st.Gid, st.Mode&0o777)
	}
	if b, _ := os.ReadFile(filepath.Join(dst, "d", "f.txt")); string(b) != "hello" {
		t.Errorf("content %q", b)
	}
	if got := time.Unix(st.Mtim.Unix()); !got.Equal(mtime) {
		t.Errorf("f.txt mtime %v, want %v", got, mtime)
	}
	if b, _ := os.ReadFile(filepath.Join(dst, "big")); !bytes.Equal(b, big) {
		t.Errorf("big: %d bytes copied, want %d the same", len(b), len(big))
	}
	unix.Lstat(filepath.Join(dst, "suid"), &st)
	if st.Uid != 1000 || st.Mode&0o7777 != 0o4755 {
		t.Errorf("suid: owner %d mode %o, want 1000 and 4755", st.Uid, st.Mode&0o7777)
	}
	if b, _ := os.ReadFile(filepath.Join(dst, "holed")); len(b) != 8<<20+4 || string(b[:4]) != "head" || string(b[8<<20:]) != "tail" || bytes.Count(b[4:8<<20], []byte{0}) != 8<<20-4 {
		t.Errorf("holed: %d bytes, wrong content", len(b))
	}
	unix.Stat(filepath.Join(dst, "holed"), &st)
	if st.Blocks*512 > 1<<20 {
		t.Errorf("holed: %d bytes allocated: the hole was filled", st.Blocks*512)
	}
	unix.Lstat(filepath.Join(dst, "d"), &st)
	if st.Mode&0o777 != 0o750 {
		t.Errorf("dir mode %o", st.Mode&0o777)
	}
	val := make([]byte, 8)
	if n, err := unix.Lgetxattr(filepath.Join(dst, "d"), "trusted.overlay.opaque", val); err != nil || string(val[:n]) != "y" {
		t.Errorf("opaque xattr = %q, %v", val[:n], err)
	}
	unix.Lstat(filepath.Join(dst, "whiteout"), &st)
	if st.Mode&unix.S_IFMT != unix.S_IFCHR || st.Rdev != 0 {
		t.Errorf("whiteout mode %o rdev %d", st.Mode, st.Rdev)
	}
	if target, _ := os.Readlink(filepath.Join(dst, "link-out")); target != "/etc/passwd" {
		t.Errorf("symlink target %q", target)
	}
	var a, b syscall.Stat_t
	syscall.Stat(filepath.Join(dst, "hard"), &a)
	syscall.Stat(filepath.Join(dst, "d", "f.txt"), &b)
	if a.Ino != b.Ino {
		t.Error("hard link became two files")
	}
	if fi, _ := os.Lstat(filepath.Join(dst, "fifo")); fi == nil || fi.Mode()&os.ModeNamedPipe == 0 {
		t.Error("fifo not copied as a fifo")
	}
	unix.Stat(filepath.Join(dst, "sparse"), &st)
	if st.Size != 10<<30+4 || st.Blocks*512 > 1<<20 {
		t.Errorf("sparse copy: size %d, %d bytes allocated", st.Size, st.Blocks*512)
	}
}

// BenchmarkCopyTree copies what a fork of a workspace with 100 changed
// files copies: the files, each in a directory of its own, under shared
// parents, as overlayfs copies them up.
func BenchmarkCopyTree(b *testing.B) {
	src := filepath.Join(b.TempDir(), "src")
	for i := range 100 {
		p := filepath.Join(src, fmt.Sprintf("d%d/e%d/f%d", i%40, i%7, i), "file.go")
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			b.Fatal(err)
		}
		if err := os.WriteFile(p, []byte("package changed\n\n// modified by a benchmark\n"), 0o644); err != nil {
			b.Fatal(err)
		}
	}
	// Into a volume, as a fork with a quota (the default) does, emptied
	// after each copy: a root file system that fills with directories
	// slows down run after run.
	vol := b.TempDir()
	if err := makeVolume(b.Context(), vol, b.TempDir(), 1<<30); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { unmountVolume(vol) })
	b.ResetTimer()
	for i := range b.N {
		dst := filepath.Join(vol, volumeMount, strconv.Itoa(i))
		if err := copyTree(b.Context(), src, dst); err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		if err := os.RemoveAll(dst); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
	}
}
