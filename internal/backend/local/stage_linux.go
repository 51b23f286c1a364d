package local

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/internal/anonmount"
	"github.com/agentbox/agentbox/internal/mountinfo"
)

// Staging. bubblewrap resolves the source of every bind mount as the
// sandbox user, after it has entered its user namespace: a source below a
// directory that user cannot traverse (the daemon's data directory is
// 0700) cannot be mounted. So the backend bind-mounts each source, as root,
// into a per-sandbox directory under the stage directory, which is
// traversable, and bubblewrap binds from there. The stage binds live only
// until the jail has executed the guest (its own mount namespace then holds
// copies) and sit under a tmpfs that is a peer group of its own: they
// propagate to the spawner's small namespace (a slave, see
// enterSmallNamespace) and to namespaces that root makes from the daemon's
// meanwhile (which see the host's files anyway); nothing propagates from a
// jail or the spawner back. Resolving the host
// paths once, as root and before the jail exists, also leaves the sandbox
// no way to race them.

// stageMountOptions make the stage tmpfs tiny and inert: it only holds
// empty mount points. Inodes are allocated as used: the limit is high
// enough for a directory and a pool point per running pooled jail (see
// pool_linux.go) beside the stages of the creates under way.
const stageMountOptions = "mode=0755,size=64k,nr_inodes=65536"

// mountStage mounts the stage tmpfs at dir, first clearing whatever an
// earlier run of the daemon left there.
func mountStage(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		return err
	}
	if err := unmountUnder(dir); err != nil {
		return err
	}
	if err := unix.Mount("agentbox-stage", dir, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, stageMountOptions); err != nil {
		return fmt.Errorf("mounting the stage tmpfs at %s: %w", dir, err)
	}
	if err := unix.Mount("", dir, "", unix.MS_PRIVATE|unix.MS_REC, ""); err != nil {
		unix.Unmount(dir, unix.MNT_DETACH)
		return fmt.Errorf("making the stage %s private: %w", dir, err)
	}
	// Then shared, in a peer group of its own: the spawner's namespace
	// holds a slave copy, which receives every stage bind (see
	// enterSmallNamespace).
	if err := unix.Mount("", dir, "", unix.MS_SHARED, ""); err != nil {
		unix.Unmount(dir, unix.MNT_DETACH)
		return fmt.Errorf("making the stage %s shared: %w", dir, err)
	}
	return nil
}

// unmountStage undoes mountStage and removes dir.
func unmountStage(dir string) error {
	if err := unmountUnder(dir); err != nil {
		return err
	}
	if err := os.Remove(dir); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
}

// unmountUnder detaches every mount at or below dir, deepest first.
func unmountUnder(dir string) error {
	mps, err := mountinfo.Under(dir)
	if err != nil {
		return fmt.Errorf("reading the mount table: %w", err)
	}
	for _, mp := range mps {
		if err := unix.Unmount(mp, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
			return fmt.Errorf("unmounting %s: %w", mp, err)
		}
	}
	return nil
}

// staged are the stage paths bubblewrap binds from.
type staged struct {
	dir                     string
	root, files, run, guest string
	// rootBound, when set, says why the root is a bind of the image's
	// directory rather than a view of it (see stage).
	rootBound error
	// tmp and shm are fresh tmpfs mounts for /tmp and /dev/shm, made here
	// rather than by bubblewrap so that they belong to root (mode 1777, as
	// everywhere) instead of the sandbox user, and carry an inode limit.
	tmp, shm string
}

// stage binds the sandbox's sources into stageDir/id and makes its two
// tmpfs mounts of tmpBytes each. With no files (a pooled jail's) the
// files entry is the pool point instead (see pool_linux.go). On error it
// undoes what it did.
func stage(stageDir, id, rootfs, files, run, guest string, tmpBytes int64) (st staged, err error) {
	st.dir = filepath.Join(stageDir, id)
	if err := os.Mkdir(st.dir, 0o755); err != nil {
		return st, fmt.Errorf("stage %s: %w", st.dir, err)
	}
	defer func() {
		if err != nil {
			st.unstage()
		}
	}()
	for _, b := range []struct {
		src  string
		dst  *string
		name string
		dir  bool
	}{
		{rootfs, &st.root, "root", true},
		{files, &st.files, "files", true},
		{run, &st.run, "run", true},
		{guest, &st.guest, "guest", false},
	} {
		p := filepath.Join(st.dir, b.name)
		if b.dir {
			err = os.Mkdir(p, 0o755)
		} else {
			err = os.WriteFile(p, nil, 0o644)
		}
		if err != nil {
			return st, fmt.Errorf("stage %s: %w", p, err)
		}
		if b.name == "files" && b.src == "" {
			if err := mountPoolPoint(p); err != nil {
				return st, err
			}
			*b.dst = p
			continue
		}
		// The root is a read-only view of the image's directory rather
		// than a bind of it, whose entry in the sandbox's mount table
		// would show the directory's host path (SECURITY.md H45); a bind
		// where overlayfs cannot serve.
		if b.name == "root" {
			if st.rootBound = anonmount.View(p, b.src); st.rootBound == nil {
				*b.dst = p
				continue
			}
		}
		// Recursive, so that a workspace made of several mounts comes
		// whole. Flags (ro, nosuid, nodev) are bubblewrap's business.
		if err := unix.Mount(b.src, p, "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
			return st, fmt.Errorf("binding %s at %s: %w", b.src, p, err)
		}
		*b.dst = p
	}
	opts := tmpfsOptions(tmpBytes)
	for _, t := range []struct {
		dst  *string
		name string
	}{{&st.tmp, "tmp"}, {&st.shm, "shm"}} {
		p := filepath.Join(st.dir, t.name)
		if err = os.Mkdir(p, 0o755); err != nil {
			return st, fmt.Errorf("stage %s: %w", p, err)
		}
		if err := unix.Mount("tmpfs", p, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, opts); err != nil {
			return st, fmt.Errorf("mounting a tmpfs at %s (%s): %w", p, opts, err)
		}
		*t.dst = p
	}
	return st, nil
}

// tmpfsOptions size a sandbox's /tmp (and /dev/shm): its bytes, and one
// inode per 4 KiB of them so that a flood of empty files stops too.
func tmpfsOptions(bytes int64) string {
	return fmt.Sprintf("mode=1777,size=%d,nr_inodes=%d", bytes, max(bytes/4096, 1024))
}

// stageEntries are the names stage makes in a sandbox's stage directory.
var stageEntries = []string{"root", "files", "run", "guest", "tmp", "shm"}

// unstage removes a sandbox's stage directory and its binds, reading the
// mount table. It is safe on a partial or missing stage.
func unstage(dir string) error {
	if err := unmountUnder(dir); err != nil {
		return err
	}
	return removeStageDir(dir)
}

// unstage removes this stage without reading the mount table.
func (st staged) unstage() error {
	if err := st.detach(); err != nil {
		return err
	}
	return removeStageDir(st.dir)
}

// detach unmounts this stage's binds and tmpfs mounts, and leaves the
// directories.
func (st staged) detach() error {
	for _, p := range []string{st.root, st.files, st.run, st.guest, st.tmp, st.shm} {
		if p == "" {
			continue
		}
		// Every mount there: a view of the root is two (anonmount.View).
		if err := anonmount.Detach(p); err != nil {
			return err
		}
	}
	return nil
}

// removeStageDir deletes the (unmounted, so empty) entries of a stage
// directory and the directory itself, never recursively: a bind still
// mounted there would lead into a workspace, and rmdir refuses a mount
// point where a recursive delete would empty it.
func removeStageDir(dir string) error {
	for _, name := range stageEntries {
		if err := os.Remove(filepath.Join(dir, name)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("removing stage entry: %w", err)
		}
	}
	if err := os.Remove(dir); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("removing stage: %w", err)
	}
	return nil
}
