package workspace

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"unsafe"

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
// file, so a name swapped after it was listed cannot lend them. It works
// on raw descriptors: a fork copies every changed file, and os.File's
// poller registration and copy_file_range (which fails across the two
// volumes) cost more system calls than the copy of a small file itself.
func (c *copier) copyFile(dirfd int, name, dst string) error {
	fd, err := unix.Openat(dirfd, name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	defer unix.Close(fd)
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
	out, err := unix.Open(dst, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return err
	}
	err = c.copyData(fd, out, st.Size, st.Blocks*512 >= st.Size)
	if err == nil {
		err = copyXattrs(fd, "", dst)
	}
	if err == nil {
		err = finishFd(out, &st)
	}
	if cerr := unix.Close(out); err == nil {
		err = cerr
	}
	return err
}

// copyData copies size bytes of in to out at the same offsets. A file
// with as many blocks as bytes has no hole and is copied whole; any other
// is copied extent by extent (SEEK_DATA/SEEK_HOLE), and its size set last.
func (c *copier) copyData(in, out int, size int64, dense bool) error {
	if dense {
		return c.copyRange(in, out, 0, size)
	}
	var off int64
	for off < size {
		data, err := unix.Seek(in, off, unix.SEEK_DATA)
		if errors.Is(err, unix.ENXIO) {
			break // only a hole remains
		}
		if err != nil {
			return err
		}
		hole, err := unix.Seek(in, data, unix.SEEK_HOLE)
		if err != nil {
			return err
		}
		if err := c.copyRange(in, out, data, hole); err != nil {
			return err
		}
		off = hole
	}
	return unix.Ftruncate(out, size)
}

// copyRange copies the bytes [from, to) of in to the same offsets of out.
// The file may shrink meanwhile (a command still writing it): the copy
// ends where its data does.
func (c *copier) copyRange(in, out int, from, to int64) error {
	if c.buf == nil {
		c.buf = make([]byte, 128<<10)
	}
	for off := from; off < to; {
		if err := c.ctx.Err(); err != nil {
			return err
		}
		n, err := unix.Pread(in, c.buf[:min(int64(len(c.buf)), to-off)], off)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return err
		}
		if n == 0 {
			return nil
		}
		for w := 0; w < n; {
			m, err := unix.Pwrite(out, c.buf[w:n], off+int64(w))
			if errors.Is(err, unix.EINTR) {
				continue
			}
			if err != nil {
				return err
			}
			w += m
		}
		off += int64(n)
	}
	return nil
}

// finishFd gives the file open at fd the owner, mode and times of st.
func finishFd(fd int, st *unix.Stat_t) error {
	if err := unix.Fchown(fd, int(st.Uid), int(st.Gid)); err != nil {
		return err
	}
	if err := unix.Fchmod(fd, st.Mode&0o7777); err != nil {
		return err
	}
	// utimensat(fd, NULL, ...) sets the times of fd itself (futimens).
	ts := [2]unix.Timespec{st.Atim, st.Mtim}
	if _, _, e := unix.Syscall6(unix.SYS_UTIMENSAT, uintptr(fd), 0, uintptr(unsafe.Pointer(&ts[0])), 0, 0, 0); e != 0 {
		return e
	}
	return nil
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
