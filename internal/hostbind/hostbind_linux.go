// Package hostbind makes the host-side binds that container backends hand
// to their runtimes as a sandbox's /workspace.
//
// The workspace must be nosuid,nodev inside the sandbox (SECURITY.md B14).
// A bind mount keeps the flags of the mount it is taken from, but neither
// Docker nor a kubelet can add flags to a bind. So a workspace that
// already sits on a nosuid,nodev mount (the overlay workspace driver
// mounts so) is bound as is; any other gets a nosuid,nodev bind of its
// own in a directory of the sandbox's, which the runtime then binds into
// the container.
package hostbind

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/internal/errdefs"
	"github.com/agentbox/agentbox/internal/mountinfo"
)

// flagsKept maps the statfs flags of the source mount that its bind keeps.
var flagsKept = []struct{ st, ms uintptr }{
	{unix.ST_RDONLY, unix.MS_RDONLY},
	{unix.ST_NOEXEC, unix.MS_NOEXEC},
	{unix.ST_NOATIME, unix.MS_NOATIME},
	{unix.ST_NODIRATIME, unix.MS_NODIRATIME},
	{unix.ST_RELATIME, unix.MS_RELATIME},
}

// RemountFlags are the flags of a nosuid,nodev remount of a bind of a
// mount whose statfs flags are st: the source's own flags kept.
func RemountFlags(st unix.Statfs_t) uintptr {
	flags := uintptr(unix.MS_BIND | unix.MS_REMOUNT | unix.MS_NOSUID | unix.MS_NODEV)
	for _, f := range flagsKept {
		if uintptr(st.Flags)&f.st != 0 {
			flags |= f.ms
		}
	}
	return flags
}

// Workspace returns the host path to bind at /workspace for the workspace
// files: files itself (symlinks resolved) when it is on a nosuid,nodev
// mount, else a nosuid,nodev bind of it made in a new directory under
// dir (one per call: a refused duplicate create of a live sandbox must not
// touch the bind that sandbox runs on). canBind, when not nil, is asked
// before a bind is made (for example whether the runtime shares this
// process's mount namespace). release undoes what was made; dir itself is
// removed when nothing else is left in it.
func Workspace(dir, files string, canBind func() error) (string, func() error, error) {
	noop := func() error { return nil }
	src, err := filepath.EvalSymlinks(files)
	if err != nil {
		return "", nil, errdefs.Invalid("%v", err)
	}
	var st unix.Statfs_t
	if err := unix.Statfs(src, &st); err != nil {
		return "", nil, fmt.Errorf("statfs: %w", err)
	}
	if st.Flags&unix.ST_NOSUID != 0 && st.Flags&unix.ST_NODEV != 0 {
		return src, noop, nil
	}
	if canBind != nil {
		if err := canBind(); err != nil {
			return "", nil, err
		}
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", nil, fmt.Errorf("workspace bind directory: %w", err)
	}
	mp, err := os.MkdirTemp(dir, "")
	if err != nil {
		return "", nil, fmt.Errorf("workspace bind: %w", err)
	}
	release := func() error {
		err := UnmountAndRemove(mp)
		os.Remove(dir) // only when no other bind of the sandbox is in it
		return err
	}
	steps := []struct {
		what        string
		src, fstype string
		flags       uintptr
	}{
		{"binding", src, "", unix.MS_BIND | unix.MS_REC},
		{"making the bind nosuid,nodev", "", "", RemountFlags(st)},
		{"making the bind private", "", "", unix.MS_PRIVATE},
	}
	for _, s := range steps {
		if err := unix.Mount(s.src, mp, s.fstype, s.flags, ""); err != nil {
			release()
			if errors.Is(err, unix.EPERM) {
				return "", nil, fmt.Errorf("%s %s to %s: %w (the workspace is not on a nosuid,nodev mount and making one needs root): %w", s.what, src, mp, err, errdefs.ErrUnavailable)
			}
			return "", nil, fmt.Errorf("%s %s to %s: %w", s.what, src, mp, err)
		}
	}
	return mp, release, nil
}

// UnmountAndRemove detaches every mount at or below mp and removes the
// directories. A missing mp is not an error.
func UnmountAndRemove(mp string) error {
	if _, err := os.Lstat(mp); errors.Is(err, os.ErrNotExist) {
		return nil
	}
	points, err := mountinfo.Under(mp)
	if err != nil {
		return fmt.Errorf("reading the mount table: %w", err)
	}
	for _, p := range points {
		if err := unix.Unmount(p, unix.MNT_DETACH|unix.UMOUNT_NOFOLLOW); err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
			return fmt.Errorf("unmounting workspace bind %s: %w", p, err)
		}
	}
	// Only empty directories are removed: after the unmount that is all
	// there is, and anything else is not ours to delete.
	return removeEmptyTree(mp)
}

// removeEmptyTree removes dir and the directories below it, deepest first,
// and fails on anything that is not an empty directory.
func removeEmptyTree(dir string) error {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("removing workspace bind directory: %w", err)
	}
	for _, e := range entries {
		if !e.IsDir() {
			return fmt.Errorf("removing workspace bind directory: %s holds %s after the unmount", dir, e.Name())
		}
		if err := removeEmptyTree(filepath.Join(dir, e.Name())); err != nil {
			return err
		}
	}
	if err := os.Remove(dir); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("removing workspace bind directory: %w", err)
	}
	return nil
}
