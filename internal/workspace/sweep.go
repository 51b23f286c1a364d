package workspace

import (
	"os"
	"path"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// TempPattern matches the temporary files of the file API's atomic writes
// (see fileapi). One left behind by a crash is excluded from diffs and
// removed by SweepTemp.
const TempPattern = ".agentbox-tmp-*"

// SweepTemp removes temporary files left by writes that a crash cut short.
// For overlay workspaces it looks only at the upper layer (the workspace's
// own changes), so its cost does not grow with the repo, and removes what
// it finds through the mounted view (overlayfs does not allow changing a
// layer under a live mount). Copy workspaces are not swept: their temp
// files stay excluded from results. Call it with the files attached.
func SweepTemp(d Driver, dir string) (removed int) {
	d, dir = unwrapQuota(d, dir)
	if d.Name() != Overlay {
		return 0
	}
	root, err := os.OpenRoot(d.Files(dir))
	if err != nil {
		return 0
	}
	defer root.Close()
	// The upper layer is the tree the sandbox changes, and one left over
	// from before a crash may still be running: every name is looked up
	// relative to its parent directory's descriptor, and directories are
	// opened O_DIRECTORY|O_NOFOLLOW|O_NONBLOCK, so that a directory swapped
	// for a symlink or a FIFO mid-walk is skipped, never followed out of
	// the tree or blocked on (SECURITY.md H43).
	fd, err := unix.Open(filepath.Join(dir, "upper"), walkDirFlags, 0)
	if err != nil {
		return 0
	}
	var walk func(fd int, rel string)
	walk = func(fd int, rel string) {
		d := os.NewFile(uintptr(fd), rel)
		defer d.Close()
		names, _ := d.Readdirnames(-1)
		for _, name := range names {
			var st unix.Stat_t
			if unix.Fstatat(fd, name, &st, unix.AT_SYMLINK_NOFOLLOW) != nil {
				continue
			}
			p := path.Join(rel, name)
			switch st.Mode & unix.S_IFMT {
			case unix.S_IFREG:
				if strings.HasPrefix(name, ".agentbox-tmp-") && root.Remove(p) == nil {
					removed++
				}
			case unix.S_IFDIR:
				if cfd, err := unix.Openat(fd, name, walkDirFlags, 0); err == nil {
					walk(cfd, p)
				}
			}
		}
	}
	walk(fd, ".")
	return removed
}

// walkDirFlags open a directory of a tree a sandbox changes: never
// through a symlink, never blocking on a FIFO put in its place.
const walkDirFlags = unix.O_RDONLY | unix.O_DIRECTORY | unix.O_NOFOLLOW | unix.O_NONBLOCK | unix.O_CLOEXEC
