package workspace

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"

	"golang.org/x/sys/unix"
)

// copyTree copies src into dst (created) in-process: owners, modes, times,
// extended attributes (overlayfs keeps whiteouts' and opaque directories'
// meaning in trusted.overlay.* attributes), device nodes (whiteouts are
// 0/0 character devices), symlinks and hard links, and it keeps holes, so
// a huge sparse file planted by a sandbox is not blown up by a fork.
//
// src is a tree a sandbox may be changing while it is copied (a command
// still running in the parent's sandbox): every name in it is resolved
// relative to its parent directory's descriptor and opened with
// O_NOFOLLOW, never by a path from the top, so a directory exchanged for a
// symlink mid-walk is refused where it stands instead of followed out of
// the tree (SECURITY.md H43). What is copied is what each descriptor
// held when it was opened. dst is not visible to anyone yet.
func copyTree(ctx context.Context, src, dst string) error {
	c := &copier{ctx: ctx, links: map[[2]uint64]string{}}
	fd, err := unix.Open(src, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("copying %s: %w", src, err)
	}
	if err := c.copyDir(fd, dst, true); err != nil {
		return fmt.Errorf("copying %s: %w", src, err)
	}
	return nil
}

type copier struct {
	ctx   context.Context
	links map[[2]uint64]string // (dev, ino) of multiply-linked files -> first copy
	buf   []byte
}

// copyDir copies the directory open at fd (which it closes) to dst.
func (c *copier) copyDir(fd int, dst string, top bool) error {
	dir := os.NewFile(uintptr(fd), dst)
	defer dir.Close()
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return err
	}
	if err := unix.Mkdir(dst, 0o700); err != nil && !(top && errors.Is(err, unix.EEXIST)) {
		return err
	}
	entries, err := dir.ReadDir(-1)
	if err != nil {
		return err
	}
	for _, e := range entries {
		if err := c.ctx.Err(); err != nil {
			return err
		}
		if err := c.copyEntry(fd, e.Name(), filepath.Join(dst, e.Name())); err != nil {
			return err
		}
	}
	if err := copyXattrs(fd, "", dst); err != nil {
		return err
	}
	return finish(dst, &st)
}

// copyEntry copies name, in the directory open at dirfd, to dst.
func (c *copier) copyEntry(dirfd int, name, dst string) error {
	var st unix.Stat_t
	if err := unix.Fstatat(dirfd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return err
	}
	switch mode := st.Mode & unix.S_IFMT; mode {
	case unix.S_IFDIR:
		fd, err := unix.Openat(dirfd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		return c.copyDir(fd, dst, false)
	case unix.S_IFREG:
		return c.copyFile(dirfd, name, dst)
	case unix.S_IFLNK:
		target, err := readlinkat(dirfd, name)
		if err != nil {
			return err
		}
		if err := unix.Symlink(target, dst); err != nil {
			return err
		}
	case unix.S_IFCHR, unix.S_IFBLK, unix.S_IFIFO, unix.S_IFSOCK:
		if err := unix.Mknod(dst, mode|st.Mode&0o7777, int(st.Rdev)); err != nil {
			return err
		}
	default:
		return fmt.Errorf("%s: unsupported file type %o", name, mode)
	}
	if err := copyXattrs(dirfd, name, dst); err != nil {
		return err
	}
	return finish(dst, &st)
}

// finish gives dst the owner, mode and times of st.
func finish(dst string, st *unix.Stat_t) error {
	if err := unix.Lchown(dst, int(st.Uid), int(st.Gid)); err != nil {
		return err
	}
	if st.Mode&unix.S_IFMT != unix.S_IFLNK {
		if err := unix.Fchmodat(unix.AT_FDCWD, dst, st.Mode&0o7777, 0); err != nil {
			return err
		}
	}
	ts := []unix.Timespec{st.Atim, st.Mtim}
	return unix.UtimesNanoAt(unix.AT_FDCWD, dst, ts, unix.AT_SYMLINK_NOFOLLOW)
}

func readlinkat(dirfd int, name string) (string, error) {
	for size := 256; ; size *= 2 {
		b := make([]byte, size)
		n, err := unix.Readlinkat(dirfd, name, b)
		if err != nil {
			return "", err
		}
		if n < size {
			return string(b[:n]), nil
		}
	}
}

// copyFile copies the regular file name in the directory open at dirfd:
// the data extents only (SEEK_DATA/SEEK_HOLE), then the size, so holes
// stay holes. The owner, mode, times and attributes come from the open
// file, so a name swapped after it was listed cannot lend them.
func (c *copier) copyFile(dirfd int, name, dst string) error {
	fd, err := unix.Openat(dirfd, name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	in := os.NewFile(uintptr(fd), name)
	defer in.Close()
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return err
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return fmt.Errorf("%s: changed from a regular file while it was copied", name)
	}
	key := [2]uint64{st.Dev, st.Ino}
	if st.Nlink > 1 {
		if first, ok := c.links[key]; ok {
			return unix.Link(first, dst)
		}
		c.links[key] = dst
	}
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
	if err := out.Close(); err != nil {
		return err
	}
	if err := copyXattrs(fd, "", dst); err != nil {
		return err
	}
	return finish(dst, &st)
}

// copyXattrs copies the extended attributes of name in the directory
// open at fd (or, with name "", of fd itself) to dst. A name is reached
// through /proc/self/fd/FD/NAME without following it: only its last
// component is looked up, in the directory the descriptor holds.
func copyXattrs(fd int, name, dst string) error {
	var list func([]byte) (int, error)
	var get func(string, []byte) (int, error)
	if name == "" {
		list = func(b []byte) (int, error) { return unix.Flistxattr(fd, b) }
		get = func(n string, b []byte) (int, error) { return unix.Fgetxattr(fd, n, b) }
	} else {
		p := "/proc/self/fd/" + strconv.Itoa(fd) + "/" + name
		list = func(b []byte) (int, error) { return unix.Llistxattr(p, b) }
		get = func(n string, b []byte) (int, error) { return unix.Lgetxattr(p, n, b) }
	}
	sz, err := list(nil)
	if err != nil || sz == 0 {
		if errors.Is(err, unix.ENOTSUP) {
			return nil
		}
		return err
	}
	names := make([]byte, sz)
	sz, err = list(names)
	if err != nil {
		return err
	}
	for _, n := range splitNul(names[:sz]) {
		vsz, err := get(n, nil)
		if err != nil {
			return err
		}
		val := make([]byte, vsz)
		if vsz, err = get(n, val); err != nil {
			return err
		}
		if err := unix.Lsetxattr(dst, n, val[:vsz], 0); err != nil {
			return fmt.Errorf("setting %s on %s: %w", n, dst, err)
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
