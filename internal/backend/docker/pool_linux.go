package docker

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/internal/anonmount"
	"github.com/agentbox/agentbox/internal/errdefs"
	"github.com/agentbox/agentbox/internal/hostbind"
)

// poolPoint makes the pool point of sandbox id (see pool.go): an empty,
// read-only tmpfs, root-owned, of mode 0555, made shared in a peer group
// of its own (Docker accepts rslave propagation only from a shared or
// slave mount), and returns it with how to release it. A tmpfs rather
// than a directory bound onto itself: the container's /workspace keeps
// the pool point under the workspace attached on top of it, and a bind
// would show the pool point's host path in the sandbox's mount table
// (SECURITY.md H45).
func (b *Backend) poolPoint(id string) (string, func() error, error) {
	if err := sameMountNamespaceAsEngine(); err != nil {
		return "", nil, err
	}
	dir := b.bindPath(id)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", nil, fmt.Errorf("pool point directory: %w", err)
	}
	p := filepath.Join(dir, poolPointName)
	if err := os.Mkdir(p, 0o555); err != nil {
		if errors.Is(err, os.ErrExist) {
			return "", nil, fmt.Errorf("pool point %s exists already: %w", p, errdefs.ErrConflict)
		}
		return "", nil, fmt.Errorf("pool point: %w", err)
	}
	release := func() error { return unmountAndRemove(dir) }
	steps := []struct {
		what  string
		src   string
		flags uintptr
	}{
		{"mounting the pool point", anonmount.Source, unix.MS_RDONLY | unix.MS_NOSUID | unix.MS_NODEV | unix.MS_NOEXEC},
		// Private first: out of whatever peer group the parent mount is
		// in, so that nothing outside this sandbox shares it.
		{"making the pool point private", "", unix.MS_PRIVATE},
		{"making the pool point shared", "", unix.MS_SHARED},
	}
	for i, s := range steps {
		fstype, data := "", ""
		if i == 0 {
			fstype, data = "tmpfs", "mode=0555,size=4k,nr_inodes=16"
		}
		if err := unix.Mount(s.src, p, fstype, s.flags, data); err != nil {
			release()
			if errors.Is(err, unix.EPERM) {
				return "", nil, fmt.Errorf("%s %s: %w (a warm pool needs root): %w", s.what, p, err, errdefs.ErrUnavailable)
			}
			return "", nil, fmt.Errorf("%s %s: %w", s.what, p, err)
		}
	}
	return p, release, nil
}

// attach binds files, nosuid,nodev, onto the pool point of sandbox id,
// from where the mount propagates into the container.
func (b *Backend) attach(id, files string) error {
	p := filepath.Join(b.bindPath(id), poolPointName)
	if fi, err := os.Lstat(p); err != nil || !fi.IsDir() {
		return fmt.Errorf("pool point %s is missing (not a pooled sandbox, or removed): %w", p, errdefs.ErrNotFound)
	}
	src, err := filepath.EvalSymlinks(files)
	if err != nil {
		return errdefs.Invalid("%v", err)
	}
	if fi, err := os.Stat(src); err != nil || !fi.IsDir() {
		return errdefs.Invalid("workspace %s is not a directory", files)
	}
	var st unix.Statfs_t
	if err := unix.Statfs(src, &st); err != nil {
		return fmt.Errorf("statfs: %w", err)
	}
	// The bind is made privately first, then bound onto the pool point:
	// a remount's flags do not propagate, so the mount must be nosuid,nodev
	// before its copy reaches the container; and private, so that, like
	// Docker's rprivate bind of a cold sandbox, it shares no later mount or
	// unmount with the workspace's own mount (a peer on a host whose root
	// is shared).
	tmp, err := os.MkdirTemp(b.bindPath(id), "attach-")
	if err != nil {
		return fmt.Errorf("workspace bind: %w", err)
	}
	done := false
	defer func() {
		if !done {
			unmountAndRemove(tmp)
		}
	}()
	flags := hostbind.RemountFlags(st)
	steps := []struct {
		what     string
		src, dst string
		flags    uintptr
	}{
		{"binding", src, tmp, unix.MS_BIND | unix.MS_REC},
		{"making the bind nosuid,nodev", "", tmp, flags},
		{"making the bind private", "", tmp, unix.MS_PRIVATE | unix.MS_REC},
		{"binding onto the pool point", tmp, p, unix.MS_BIND | unix.MS_REC},
	}
	for _, s := range steps {
		if err := unix.Mount(s.src, s.dst, "", s.flags, ""); err != nil {
			return fmt.Errorf("%s %s to %s: %w", s.what, src, s.dst, err)
		}
	}
	// The copy on the pool point stays; the private bind goes, subtree
	// and all, without a read of the mount table.
	if err := unix.Unmount(tmp, unix.MNT_DETACH|unix.UMOUNT_NOFOLLOW); err != nil {
		return fmt.Errorf("unmounting the private bind %s: %w", tmp, err)
	}
	done = true
	return os.Remove(tmp)
}
