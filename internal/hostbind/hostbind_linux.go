package hostbind

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/internal/anonmount"
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

// etcHosts is what an engine writes into /etc/hosts of a container
// without a network.
const etcHosts = "127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\nfe00::0\tip6-localnet\nff00::0\tip6-mcastprefix\nff02::1\tip6-allnodes\nff02::2\tip6-allrouters\n"

// Etc makes at dir a small tmpfs holding a sandbox's /etc files
// (EtcFiles), hostname its host name, and returns how to take it off the
// host: once the runtime has bound them into the container, whose mount
// namespace then holds copies. Runtimes bind /etc/hostname, /etc/hosts and
// /etc/resolv.conf into every container from files under their own data
// root, whose host paths then show in the container's mount table
// (SECURITY.md H45), and the resolv.conf they write for a container
// without a network is the host's; they bind theirs only where the
// container has no mount of its own. From this tmpfs the files show as
// "/hostname", "/hosts" and "/resolv.conf". The resolv.conf is empty: the
// sandbox has no network, and the names its proxy requests carry are
// resolved by the daemon.
func Etc(dir, hostname string) (func() error, error) {
	release, err := mountAt(dir, "/etc files", func() error { return anonmount.Tmpfs(dir, 64<<10, 16) })
	if err != nil {
		return nil, err
	}
	content := map[string]string{"hostname": hostname + "\n", "hosts": etcHosts, "resolv.conf": ""}
	for _, f := range EtcFiles {
		if err := os.WriteFile(filepath.Join(dir, f.Name), []byte(content[f.Name]), 0o644); err != nil {
			release()
			return nil, fmt.Errorf("/etc files: %w", err)
		}
	}
	return release, nil
}

// Tmp mounts at dir a sandbox's /tmp: a tmpfs of at most size bytes,
// nosuid and nodev but executable (builds and test runners execute what
// they put in /tmp), mode 1777, and returns how to take it off the host
// once the runtime has bound it into the container. Its pages are charged
// to the memory cgroup of whoever writes them: the sandbox.
func Tmp(dir string, size int64) (func() error, error) {
	return mountAt(dir, "/tmp", func() error {
		if err := unix.Mount(anonmount.Source, dir, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, fmt.Sprintf("mode=1777,size=%d", size)); err != nil {
			return fmt.Errorf("mounting /tmp at %s: %w", dir, err)
		}
		return nil
	})
}

// mountAt makes directory dir, mounts there what mount mounts, and
// returns how to take it off the host again (detach, remove dir). what
// names it in errors. On error nothing is left.
func mountAt(dir, what string, mount func() error) (func() error, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	release := func() error {
		err := anonmount.Detach(dir)
		if rerr := os.Remove(dir); rerr != nil && !errors.Is(rerr, os.ErrNotExist) && err == nil {
			err = fmt.Errorf("%s: %w", what, rerr)
		}
		return err
	}
	if err := mount(); err != nil {
		release()
		return nil, err
	}
	return release, nil
}
