package workspace

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"

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
