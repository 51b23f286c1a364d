package bench

import (
	"github.com/agentbox/agentbox/internal/mountinfo"

	"golang.org/x/sys/unix"
)

// mountsUnder lists the mount points at or below dir.
func mountsUnder(dir string) ([]string, error) { return mountinfo.Under(dir) }

// detach lazily unmounts path.
func detach(path string) { unix.Unmount(path, unix.MNT_DETACH) }

// quiesce writes dirty data back to disk.
func quiesce() { unix.Sync() }
