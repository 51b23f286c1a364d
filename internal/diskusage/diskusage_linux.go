package diskusage

import (
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/internal/mountinfo"
)

// Measure returns the usage of dir: the used blocks of its file system
// when dir is a mount point (a file system of its own, where statfs is
// exact and free), else a walk as in Tree.
func Measure(dir string) (Usage, error) {
	dir = filepath.Clean(dir)
	if mp, err := mountinfo.IsMountPoint(dir); err == nil && mp {
		var st unix.Statfs_t
		if err := unix.Statfs(dir, &st); err != nil {
			return Usage{}, fmt.Errorf("statfs %s: %w", dir, err)
		}
		return Usage{Bytes: int64(st.Blocks-st.Bfree) * int64(st.Bsize), Method: MethodStatfs}, nil
	}
	n, err := Tree(dir)
	return Usage{Bytes: n, Method: MethodWalk}, err
}

// Tree is the allocated size of everything under dir (dir included),
// counting each inode once and descending into no mount.
func Tree(dir string) (int64, error) {
	w, err := newWalker(dir)
	if err != nil {
		return 0, err
	}
	seen := map[inode]bool{}
	var total int64
	w.walk(dir, func(ino inode, nlink uint64, bytes int64) {
		if nlink > 1 {
			if seen[ino] {
				return
			}
			seen[ino] = true
		}
		total += bytes
	})
	return total, nil
}

// Exclusive is what removing every one of paths would free: the
// allocated size of the inodes all of whose hard links lie under paths.
// A file linked from elsewhere too (a pristine checkout's objects shared
// with its mirror) frees nothing and counts nothing. Missing paths count
// zero.
func Exclusive(paths ...string) (int64, error) {
	type links struct {
		seen, nlink uint64
		bytes       int64
	}
	multi := map[inode]*links{}
	var total int64
	for _, p := range paths {
		p = filepath.Clean(p)
		if _, err := os.Lstat(p); os.IsNotExist(err) {
			continue
		}
		w, err := newWalker(p)
		if err != nil {
			return 0, err
		}
		w.walk(p, func(ino inode, nlink uint64, bytes int64) {
			if nlink <= 1 {
				total += bytes
				return
			}
			l := multi[ino]
			if l == nil {
				l = &links{nlink: nlink, bytes: bytes}
				multi[ino] = l
			}
			l.seen++
		})
	}
	for _, l := range multi {
		if l.seen >= l.nlink {
			total += l.bytes
		}
	}
	return total, nil
}

type inode struct{ dev, ino uint64 }

// walker walks one tree on one file system.
type walker struct {
	dev    uint64
	mounts map[string]bool
}

func newWalker(root string) (*walker, error) {
	var st unix.Stat_t
	if err := unix.Lstat(root, &st); err != nil {
		return nil, fmt.Errorf("measuring %s: %w", root, err)
	}
	mps, err := mountinfo.Under(root)
	if err != nil {
		return nil, fmt.Errorf("measuring %s: reading the mount table: %w", root, err)
	}
	w := &walker{dev: uint64(st.Dev), mounts: map[string]bool{}}
	for _, mp := range mps {
		if mp != filepath.Clean(root) {
			w.mounts[mp] = true
		}
	}
	return w, nil
}

// walk calls count for every inode under root on root's file system.
// Entries that vanish or cannot be read while walking are skipped, as du
// skips them: the data dir changes under a collector.
//
// The data dir holds trees that sandboxes change while they are measured
// (copy workspaces, overlay upper layers): every name is looked up
// relative to its parent directory's descriptor and directories are
// opened with O_NOFOLLOW, so a directory exchanged for a symlink mid-walk
// is skipped, never followed out of the tree (SECURITY.md H43).
func (w *walker) walk(root string, count func(ino inode, nlink uint64, bytes int64)) {
	fd, err := unix.Open(root, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		// Not a directory: the one file.
		var st unix.Stat_t
		if unix.Lstat(root, &st) == nil && uint64(st.Dev) == w.dev && st.Mode&unix.S_IFMT != unix.S_IFDIR {
			count(inode{uint64(st.Dev), st.Ino}, uint64(st.Nlink), st.Blocks*512)
		}
		return
	}
	var st unix.Stat_t
	if unix.Fstat(fd, &st) != nil || uint64(st.Dev) != w.dev {
		unix.Close(fd)
		return
	}
	count(inode{uint64(st.Dev), st.Ino}, 1, st.Blocks*512)
	w.walkDir(fd, root, count)
}

// walkDir counts what the directory open at fd (path p) holds, and closes
// fd. Its names are read first, so that one descriptor per level is open.
func (w *walker) walkDir(fd int, p string, count func(ino inode, nlink uint64, bytes int64)) {
	dir := os.NewFile(uintptr(fd), p)
	defer dir.Close()
	var names []string
	for {
		batch, err := dir.Readdirnames(1024)
		names = append(names, batch...)
		if err != nil {
			break
		}
	}
	for _, name := range names {
		var st unix.Stat_t
		if unix.Fstatat(fd, name, &st, unix.AT_SYMLINK_NOFOLLOW) != nil {
			continue
		}
		if uint64(st.Dev) != w.dev {
			continue // a file system of its own, not ours to count
		}
		child := filepath.Join(p, name)
		isDir := st.Mode&unix.S_IFMT == unix.S_IFDIR
		if isDir && w.mounts[child] {
			continue // a bind mount of the same file system
		}
		nlink := uint64(st.Nlink)
		if isDir {
			nlink = 1 // a directory's count is its subdirectories' "..", not links
		}
		count(inode{uint64(st.Dev), st.Ino}, nlink, st.Blocks*512)
		if !isDir {
			continue
		}
		cfd, err := unix.Openat(fd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != nil {
			continue
		}
		var cst unix.Stat_t
		if unix.Fstat(cfd, &cst) != nil || uint64(cst.Dev) != w.dev {
			unix.Close(cfd) // mounted over since it was looked at
			continue
		}
		w.walkDir(cfd, child, count)
	}
}
