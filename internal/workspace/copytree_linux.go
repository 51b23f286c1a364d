package workspace

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// copyTree copies src into dst (created) in-process: owners, modes, times,
// extended attributes (overlayfs keeps whiteouts' and opaque directories'
// meaning in trusted.overlay.* attributes), device nodes (whiteouts are
// 0/0 character devices), symlinks and hard links, and it keeps holes, so
// a huge sparse file planted by a sandbox is not blown up by a fork. It
// never follows a symlink. Nothing else may change src or dst meanwhile
// (callers hold the workspace's lock; dst is not visible to anyone yet).
func copyTree(ctx context.Context, src, dst string) error {
	c := &copier{ctx: ctx, links: map[[2]uint64]string{}}
	var st unix.Stat_t
	if err := unix.Lstat(src, &st); err != nil {
		return fmt.Errorf("copying %s: %w", src, err)
	}
	if err := c.copy(src, dst, &st, true); err != nil {
		return fmt.Errorf("copying %s: %w", src, err)
	}
	return nil
}

type copier struct {
	ctx   context.Context
	links map[[2]uint64]string // (dev, ino) of multiply-linked files -> first copy
	buf   []byte
}

func (c *copier) copy(src, dst string, st *unix.Stat_t, top bool) error {
	if err := c.ctx.Err(); err != nil {
		return err
	}
	mode := st.Mode & unix.S_IFMT
	perm := st.Mode & 0o7777
	switch mode {
	case unix.S_IFDIR:
		if err := unix.Mkdir(dst, 0o700); err != nil && !(top && errors.Is(err, unix.EEXIST)) {
			return err
		}
		entries, err := os.ReadDir(src)
		if err != nil {
			return err
		}
		for _, e := range entries {
			var cst unix.Stat_t
			s, d := filepath.Join(src, e.Name()), filepath.Join(dst, e.Name())
			if err := unix.Lstat(s, &cst); err != nil {
				return err
			}
			if err := c.copy(s, d, &cst, false); err != nil {
				return err
			}
		}
	case unix.S_IFREG:
		key := [2]uint64{st.Dev, st.Ino}
		if st.Nlink > 1 {
			if first, ok := c.links[key]; ok {
				return unix.Link(first, dst)
			}
			c.links[key] = dst
		}
		if err := c.copyFile(src, dst, st); err != nil {
			return err
		}
	case unix.S_IFLNK:
		target, err := os.Readlink(src)
		if err != nil {
			return err
		}
		if err := unix.Symlink(target, dst); err != nil {
			return err
		}
	case unix.S_IFCHR, unix.S_IFBLK, unix.S_IFIFO, unix.S_IFSOCK:
		if err := unix.Mknod(dst, mode|perm, int(st.Rdev)); err != nil {
			return err
		}
	default:
		return fmt.Errorf("%s: unsupported file type %o", src, mode)
	}
	if err := unix.Lchown(dst, int(st.Uid), int(st.Gid)); err != nil {
		return err
	}
	if mode != unix.S_IFLNK {
		if err := unix.Fchmodat(unix.AT_FDCWD, dst, perm, 0); err != nil {
			return err
		}
	}
	if err := copyXattrs(src, dst); err != nil {
		return err
	}
	ts := []unix.Timespec{st.Atim, st.Mtim}
	return unix.UtimesNanoAt(unix.AT_FDCWD, dst, ts, unix.AT_SYMLINK_NOFOLLOW)
}

// copyFile copies the data extents of src only (SEEK_DATA/SEEK_HOLE),
// then sets the size, so holes stay holes.
func (c *copier) copyFile(src, dst string, st *unix.Stat_t) error {
	in, err := os.OpenFile(src, os.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK, 0)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL|unix.O_NOFOLLOW, 0o600)
	if err != nil {
		return err
	}
	defer out.Close()
	size := st.Size
	var off int64
	for off < size {
		if err := c.ctx.Err(); err != nil {
			return err
		}
		data, err := unix.Seek(int(in.Fd()), off, unix.SEEK_DATA)
		if errors.Is(err, unix.ENXIO) {
			break // only a hole remains
		}
		if err != nil {
			return err
		}
		hole, err := unix.Seek(int(in.Fd()), data, unix.SEEK_HOLE)
		if err != nil {
			return err
		}
		if _, err := in.Seek(data, io.SeekStart); err != nil {
			return err
		}
		if _, err := out.Seek(data, io.SeekStart); err != nil {
			return err
		}
		if _, err := io.CopyN(out, in, hole-data); err != nil && !errors.Is(err, io.EOF) {
			return err
		}
		off = hole
	}
	if err := out.Truncate(size); err != nil {
		return err
	}
	return out.Close()
}

func copyXattrs(src, dst string) error {
	sz, err := unix.Llistxattr(src, nil)
	if err != nil || sz == 0 {
		if errors.Is(err, unix.ENOTSUP) {
			return nil
		}
		return err
	}
	names := make([]byte, sz)
	sz, err = unix.Llistxattr(src, names)
	if err != nil {
		return err
	}
	for _, name := range splitNul(names[:sz]) {
		vsz, err := unix.Lgetxattr(src, name, nil)
		if err != nil {
			return err
		}
		val := make([]byte, vsz)
		if vsz, err = unix.Lgetxattr(src, name, val); err != nil {
			return err
		}
		if err := unix.Lsetxattr(dst, name, val[:vsz], 0); err != nil {
			return fmt.Errorf("setting %s on %s: %w", name, dst, err)
		}
	}
	return nil
}

func splitNul(b []byte) []string {
	var out []string
	start := 0
	for i, c := range b {
		if c == 0 {
			if i > start {
				out = append(out, string(b[start:i]))
			}
			start = i + 1
		}
	}
	return out
}
