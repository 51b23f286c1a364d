package docker

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/internal/errdefs"
	"github.com/agentbox/agentbox/internal/mountinfo"
)

// The workspace must be nosuid,nodev inside the sandbox (SECURITY.md B14).
// A bind mount keeps the flags of the mount it is taken from, but Docker has
// no way to add flags to a bind. So a workspace that already sits on a
// nosuid,nodev mount (the overlay workspace driver mounts so) is bound
// as is; any other gets a nosuid,nodev bind of its own under MountDir,
// which Docker then binds into the container.

// flagsKept maps the statfs flags of the source mount that its bind keeps.
var flagsKept = []struct{ st, ms uintptr }{
	{unix.ST_RDONLY, unix.MS_RDONLY},
	{unix.ST_NOEXEC, unix.MS_NOEXEC},
	{unix.ST_NOATIME, unix.MS_NOATIME},
	{unix.ST_NODIRATIME, unix.MS_NODIRATIME},
	{unix.ST_RELATIME, unix.MS_RELATIME},
}

// workspaceSource returns the host path to bind at /workspace for sandbox
// id, and how to release what was made for it.
func (b *Backend) workspaceSource(id, files string) (string, func() error, error) {
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
	if err := sameMountNamespaceAsEngine(); err != nil {
		return "", nil, err
	}
	// One directory per create: a refused duplicate create of a live
	// sandbox must not touch the bind that sandbox runs on.
	dir := b.bindPath(id)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", nil, fmt.Errorf("workspace bind directory: %w", err)
	}
	mp, err := os.MkdirTemp(dir, "")
	if err != nil {
		return "", nil, fmt.Errorf("workspace bind: %w", err)
	}
	release := func() error {
		err := unmountAndRemove(mp)
		os.Remove(dir) // only when no other bind of the sandbox is in it
		return err
	}
	flags := uintptr(unix.MS_BIND | unix.MS_REMOUNT | unix.MS_NOSUID | unix.MS_NODEV)
	for _, f := range flagsKept {
		if uintptr(st.Flags)&f.st != 0 {
			flags |= f.ms
		}
	}
	steps := []struct {
		what        string
		src, fstype string
		flags       uintptr
	}{
		{"binding", src, "", unix.MS_BIND | unix.MS_REC},
		{"making the bind nosuid,nodev", "", "", flags},
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

// bindPath is the directory of the workspace binds of sandbox id.
func (b *Backend) bindPath(id string) string { return filepath.Join(b.mountDir, id) }

// releaseBind removes the workspace binds of sandbox id, if there are any.
func (b *Backend) releaseBind(id string) error {
	if id == "" || strings.ContainsRune(id, '/') {
		return nil
	}
	return unmountAndRemove(b.bindPath(id))
}

// sweepBinds releases the workspace binds whose sandbox has no container
// any more (removed from outside the daemon), except those of a create
// under way.
func (b *Backend) sweepBinds(ctx context.Context) error {
	entries, err := os.ReadDir(b.mountDir)
	if errors.Is(err, os.ErrNotExist) || len(entries) == 0 {
		return nil
	}
	if err != nil {
		return err
	}
	live, err := b.List(ctx, nil)
	if err != nil {
		return err
	}
	alive := make(map[string]bool, len(live))
	for _, info := range live {
		alive[info.ID] = true
	}
	var errs []error
	for _, e := range entries {
		id := e.Name()
		if strings.HasPrefix(id, ".") || alive[id] || b.isCreating(id) {
			continue
		}
		errs = append(errs, unmountAndRemove(b.bindPath(id)))
	}
	return errors.Join(errs...)
}

// unmountAndRemove detaches every mount at or below mp and removes the
// directories. A missing mp is not an error.
func unmountAndRemove(mp string) error {
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

// dockerPidFile is where dockerd writes its pid by default.
const dockerPidFile = "/var/run/docker.pid"

// sameMountNamespaceAsEngine refuses to make a workspace bind that a local
// dockerd would not see because this process runs in another mount
// namespace (a systemd unit with PrivateTmp=, say): the engine would bind
// the empty directory under it instead. When the engine's namespace cannot
// be read the bind goes ahead.
func sameMountNamespaceAsEngine() error {
	pidText, err := os.ReadFile(dockerPidFile)
	if err != nil {
		return nil
	}
	pid := strings.TrimSpace(string(pidText))
	if comm, err := os.ReadFile("/proc/" + pid + "/comm"); err != nil || strings.TrimSpace(string(comm)) != "dockerd" {
		return nil
	}
	engine, err1 := os.Readlink("/proc/" + pid + "/ns/mnt")
	self, err2 := os.Readlink("/proc/self/ns/mnt")
	if err1 != nil || err2 != nil {
		return nil
	}
	if self != engine {
		return fmt.Errorf("this process runs in another mount namespace than dockerd (pid %s), which would not see a workspace bind made here; "+
			"run it in the host's mount namespace or put workspaces on a nosuid,nodev mount (the overlay driver does): %w", pid, errdefs.ErrUnavailable)
	}
	return nil
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

// maskName is the file under MountDir that masks device nodes. Sandbox ids
// never start with a dot, so the sweep of workspace binds passes it by.
const maskName = ".mask"

// maskFile returns an empty root-owned file of mode 0000, made once, to bind
// over device nodes that a sandbox must not open: a non-root user without
// capabilities gets EACCES from it, whatever the node was.
func (b *Backend) maskFile() (string, error) {
	p := filepath.Join(b.mountDir, maskName)
	if fi, err := os.Lstat(p); err == nil && isMask(fi) {
		return p, nil
	}
	if err := os.MkdirAll(b.mountDir, 0o700); err != nil {
		return "", fmt.Errorf("mask file: %w", err)
	}
	tmp, err := os.CreateTemp(b.mountDir, maskName+".tmp-")
	if err != nil {
		return "", fmt.Errorf("mask file: %w", err)
	}
	tmp.Close()
	if err := os.Chmod(tmp.Name(), 0); err != nil {
		os.Remove(tmp.Name())
		return "", fmt.Errorf("mask file: %w", err)
	}
	// A rename replaces whatever stood there (a file of another mode, a
	// symlink) in one step, and concurrent creates all end with a mask.
	if err := os.Rename(tmp.Name(), p); err != nil {
		os.Remove(tmp.Name())
		return "", fmt.Errorf("mask file: %w", err)
	}
	return p, nil
}

func isMask(fi os.FileInfo) bool {
	st, ok := fi.Sys().(*syscall.Stat_t)
	return ok && fi.Mode().IsRegular() && fi.Mode().Perm() == 0 && fi.Size() == 0 && st.Uid == 0
}
