package workspace

import (
	"io/fs"
	"os"
	"path/filepath"
	"strings"
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
	// The upper layer is walked inside an os.Root too: it is the tree the
	// sandbox changes, and a directory it swaps for a symlink mid-walk
	// must not lead the walk out (SECURITY.md H43).
	upper, err := os.OpenRoot(filepath.Join(dir, "upper"))
	if err != nil {
		return 0
	}
	defer upper.Close()
	fs.WalkDir(upper.FS(), ".", func(p string, e fs.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		if e.Type().IsRegular() && strings.HasPrefix(e.Name(), ".agentbox-tmp-") && root.Remove(p) == nil {
			removed++
		}
		return nil
	})
	return removed
}
