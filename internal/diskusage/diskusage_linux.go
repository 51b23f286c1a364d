package diskusage

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"

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
	var st syscall.Stat_t
	if err := syscall.Lstat(root, &st); err != nil {
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
func (w *walker) walk(root string, count func(ino inode, nlink uint64, bytes int64)) {
	filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if d != nil && d.IsDir() && p != root {
				return filepath.SkipDir
			}
			return nil
		}
		if d.IsDir() && w.mounts[p] {
			return filepath.SkipDir // a file system of its own, not ours to count
		}
		var st syscall.Stat_t
		if syscall.Lstat(p, &st) != nil {
			return nil
		}
		if uint64(st.Dev) != w.dev {
			// A mount the table did not show when the walk began.
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		nlink := uint64(st.Nlink)
		if d.IsDir() {
			nlink = 1 // a directory's count is its subdirectories' "..", not links
		}
		count(inode{uint64(st.Dev), st.Ino}, nlink, st.Blocks*512)
		return nil
	})
}
