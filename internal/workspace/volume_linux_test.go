package workspace

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/internal/errdefs"
	"github.com/agentbox/agentbox/internal/testutil"
	"github.com/agentbox/agentbox/internal/testutil/skip"
)

// freeBytes is the free space of the file system holding path.
func freeBytes(t *testing.T, path string) int64 {
	t.Helper()
	var fs unix.Statfs_t
	if err := unix.Statfs(path, &fs); err != nil {
		t.Fatal(err)
	}
	return int64(fs.Bavail) * fs.Bsize
}

// fill writes 1 MiB chunks to path until the write fails, and returns the
// bytes written and the error.
func fill(path string, max int64) (int64, error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o644)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	chunk := bytes.Repeat([]byte{0xa5}, 1<<20)
	var n int64
	for n < max {
		w, err := f.Write(chunk)
		n += int64(w)
		if err != nil {
			return n, err
		}
	}
	return n, f.Sync()
}

func TestQuota(t *testing.T) {
	for _, name := range []string{Overlay, Copy} {
		t.Run(name, func(t *testing.T) {
			requireDriver(t, name)
			inner, _ := New(name)
			const quota = 16 << 20
			d := WithQuota(inner, quota, t.TempDir())
			if Quota(d) != quota || Quota(inner) != 0 {
				t.Fatalf("Quota = %d / %d", Quota(d), Quota(inner))
			}
			fx := newFixture(t, name)
			dir := fx.create(t, d, "ws")
			files := d.Files(dir)
			hostFree := freeBytes(t, fx.top)

			t.Run("bytes stop at the quota", func(t *testing.T) {
				n, err := fill(filepath.Join(files, "big"), 4*quota)
				if !errors.Is(err, unix.ENOSPC) {
					t.Fatalf("writing %d bytes into a %d-byte quota: %v, want ENOSPC", n, quota, err)
				}
				if n > quota || n < quota/2 {
					t.Errorf("%d bytes fit in a quota of %d", n, quota)
				}
				// The host gave the workspace at most its quota: the image is
				// sparse and cannot grow past its size. (The host's free space
				// is logged, not asserted: other tests write to it too.)
				var st unix.Stat_t
				if err := unix.Stat(VolumeImage(dir), &st); err != nil {
					t.Fatal(err)
				}
				if st.Blocks*512 > quota {
					t.Errorf("the image holds %d bytes of host disk, its quota is %d", st.Blocks*512, quota)
				}
				t.Logf("host free space %d -> %d; image %d bytes allocated", hostFree, freeBytes(t, fx.top), st.Blocks*512)
				u, err := VolumeUsage(dir)
				if err != nil || u.Quota != quota || u.Free > 1<<20 {
					t.Errorf("VolumeUsage = %+v, %v", u, err)
				}
				// Full, the workspace still reads.
				if b, err := os.ReadFile(filepath.Join(files, "README.md")); err != nil || string(b) != "hello\n" {
					t.Errorf("reading a full workspace: %q, %v", b, err)
				}
				os.Remove(filepath.Join(files, "big"))
			})

			t.Run("files stop at the inode table", func(t *testing.T) {
				u, _ := VolumeUsage(dir)
				sub := filepath.Join(files, "many")
				if err := os.Mkdir(sub, 0o755); err != nil {
					t.Fatal(err)
				}
				var err error
				var n int64
				for n = 0; n < u.FilesFree+10; n++ {
					if err = os.WriteFile(filepath.Join(sub, fmt.Sprint(n)), nil, 0o644); err != nil {
						break
					}
				}
				if !errors.Is(err, unix.ENOSPC) {
					t.Fatalf("creating %d files (%d inodes free): %v, want ENOSPC", n, u.FilesFree, err)
				}
				if err := os.RemoveAll(sub); err != nil {
					t.Fatal(err)
				}
			})

			t.Run("survives an unmount", func(t *testing.T) {
				mustWrite(t, filepath.Join(files, "kept.txt"), "kept\n")
				// A reboot: every mount is gone, the image stays.
				if name == Overlay {
					testutil.Unmount(t, files)
				}
				testutil.Unmount(t, filepath.Join(dir, volumeMount))
				if ok, err := d.Attached(dir); err != nil || ok {
					t.Fatalf("Attached with the volume unmounted = %v, %v", ok, err)
				}
				if err := d.Attach(t.Context(), dir, fx.lower); err != nil {
					t.Fatal(err)
				}
				if b, err := os.ReadFile(filepath.Join(files, "kept.txt")); err != nil || string(b) != "kept\n" {
					t.Errorf("after re-attach: %q, %v", b, err)
				}
			})

			t.Run("fork too big for its quota", func(t *testing.T) {
				if _, err := fill(filepath.Join(files, "half"), 6<<20); err != nil {
					t.Fatal(err)
				}
				defer os.Remove(filepath.Join(files, "half"))
				child := filepath.Join(fx.top, "child")
				if err := os.Mkdir(child, 0o711); err != nil {
					t.Fatal(err)
				}
				small := WithQuota(inner, 4<<20, t.TempDir())
				err := small.Fork(t.Context(), dir, child, Source{Lower: fx.lower, UID: testUID, GID: testGID})
				if !errors.Is(err, errdefs.ErrInvalid) {
					t.Errorf("forking 6 MiB into a 4 MiB quota: %v, want ErrInvalid", err)
				}
				if err := Remove(t.Context(), small, child); err != nil {
					t.Fatal(err)
				}
				// A plain fork of a quota workspace reads the parent's
				// layout inside its volume.
				plain := filepath.Join(fx.top, "plain")
				if err := os.Mkdir(plain, 0o711); err != nil {
					t.Fatal(err)
				}
				defer Remove(t.Context(), inner, plain)
				if err := inner.Fork(t.Context(), dir, plain, Source{Lower: fx.lower, UID: testUID, GID: testGID}); err != nil {
					t.Fatal(err)
				}
				if st, err := os.Stat(filepath.Join(inner.Files(plain), "half")); err != nil || st.Size() != 6<<20 {
					t.Errorf("the plain fork's copy: %v", err)
				}
			})
		})
	}
}

func TestQuotaTooSmall(t *testing.T) {
	requireDriver(t, Copy)
	fx := newFixture(t, Copy)
	dir := filepath.Join(fx.top, "tiny")
	os.Mkdir(dir, 0o711)
	d := WithQuota(copyDriver{}, 4096, t.TempDir())
	err := d.Create(t.Context(), dir, Source{Repo: fx.repo, Commit: fx.commit})
	if !errors.Is(err, errdefs.ErrInvalid) {
		t.Errorf("a 4 KiB quota: %v, want ErrInvalid", err)
	}
	if HasVolume(dir) {
		t.Error("a refused quota left an image")
	}
}

// Many volumes made at once each get a loop device of their own (every
// concurrent LOOP_CTL_GET_FREE names the same free device).
func TestVolumesConcurrently(t *testing.T) {
	requireDriver(t, Copy)
	root, templates := t.TempDir(), t.TempDir()
	const n = 32
	errs := make(chan error, n)
	dirs := make([]string, n)
	for i := range n {
		dirs[i] = filepath.Join(root, fmt.Sprint(i))
		if err := os.Mkdir(dirs[i], 0o711); err != nil {
			t.Fatal(err)
		}
		go func() { errs <- makeVolume(t.Context(), dirs[i], templates, 4<<20) }()
	}
	for range n {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
	devs := map[uint64]string{}
	for _, d := range dirs {
		var st unix.Stat_t
		if err := unix.Stat(filepath.Join(d, volumeMount), &st); err != nil {
			t.Fatal(err)
		}
		if other, dup := devs[st.Dev]; dup {
			t.Errorf("%s and %s share a file system", d, other)
		}
		devs[st.Dev] = d
		if err := unmountVolume(d); err != nil {
			t.Error(err)
		}
	}
}

// TestTemplateV2: templates have no resize_inode (its reserved blocks
// were 4 MiB of every copy), and an older daemon's template of the same
// size goes when the new one is made.
func TestTemplateV2(t *testing.T) {
	if os.Geteuid() != 0 {
		skip.OrFail(t, "volume templates are made as root")
	}
	dir := t.TempDir()
	old := filepath.Join(dir, fmt.Sprintf("ext4-%d.img", 16<<20))
	if err := os.WriteFile(old, []byte("old template"), 0o600); err != nil {
		t.Fatal(err)
	}
	p, err := volumeTemplate(t.Context(), dir, 16<<20)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(old); !os.IsNotExist(err) {
		t.Errorf("the old template is still there: %v", err)
	}
	out, err := exec.Command("dumpe2fs", "-h", p).CombinedOutput()
	if err != nil {
		t.Fatalf("dumpe2fs: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "has_journal") || strings.Contains(string(out), "resize_inode") {
		t.Errorf("template features:\n%s", out)
	}
}
