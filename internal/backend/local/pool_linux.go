package local

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/internal/anonmount"
	"github.com/agentbox/agentbox/internal/errdefs"
	"github.com/agentbox/agentbox/internal/mountinfo"
	"github.com/agentbox/agentbox/internal/sandbox"
)

// Warm pool. A pooled jail is started before its workspace is known. Its
// stage's "files" entry is then not a bind of the workspace but the pool
// point: an empty, read-only tmpfs of mode 0555 owned by root (whom the
// jail does not map), mounted in the stage. The stage is shared, so the
// pool point is too, in a peer group of its own, and its copy in the
// spawner's namespace is its slave (see enterSmallNamespace); bubblewrap
// copies that namespace, makes every mount a slave (it does so by
// default), and binds the copy at /workspace: the jail's /workspace is a
// slave of the pool point. Once the jail runs, every other stage bind goes
// as after a cold start, but the pool point stays, and its stage directory
// is closed to everyone but root.
//
// Attach clones the workspace's mount tree (open_tree), makes the clone
// nosuid,nodev, every submount included, as bubblewrap makes a cold
// /workspace, and private, so that it shares nothing with the workspace's
// own mount, then moves it onto the pool point. The kernel propagates the
// new mount to the pool point's slaves: the spawner's copy, and the
// running jail's /workspace, which it covers, flags and all. A clone that
// never reaches the pool point is dropped when its descriptor closes.
//
// Propagation is one way: the jail's /workspace and the spawner's copy are
// slaves; nothing mounted there reaches the host (and the sandbox user
// cannot mount at all). The copy that reaches the jail's user namespace
// is locked to it: its flags cannot be cleared nor the mount taken off the
// pool point beneath.
//
// Remove takes the pool point and the workspace on it down with the rest
// of the stage (unstage reads the mount table: both are there).
//
// A pooled jail is started only from the small namespace: a spawner that
// fell back to the daemon's namespace refuses with ErrNoAttach, and so
// does CreateDetached when the started jail's /workspace turns out not to
// be a slave of its pool point (or the kernel lacks the mount calls Attach
// needs), so that pools stay empty and creations start cold.

var _ sandbox.Attacher = (*Backend)(nil)

// poolPointOptions make the pool point tiny: it only ever holds the
// empty directory that the workspace covers.
const poolPointOptions = "mode=0555,size=4k,nr_inodes=2"

// CreateDetached starts a jail for a warm pool (see sandbox.Attacher).
func (b *Backend) CreateDetached(ctx context.Context, req sandbox.CreateRequest, owner string) (sandbox.Info, error) {
	if b.noAttach != nil {
		return sandbox.Info{}, fmt.Errorf("creating pooled sandbox %s: %w", req.ID, b.noAttach)
	}
	if owner == "" {
		return sandbox.Info{}, errdefs.Invalid("creating pooled sandbox %s: no pool owner", req.ID)
	}
	return b.create(ctx, req, owner)
}

// Attach covers the empty /workspace of a pooled jail with files.
func (b *Backend) Attach(ctx context.Context, info sandbox.Info, files string) error {
	fail := func(err error) error {
		return fmt.Errorf("attaching workspace %s to sandbox %s: %w", files, info.ID, err)
	}
	if b.noAttach != nil {
		return fail(b.noAttach)
	}
	id := info.Ref
	if !validID.MatchString(id) {
		return errdefs.Invalid("attaching workspace %s: sandbox ref %q is not a local sandbox id", files, id)
	}
	unlock := b.locks.lock(id)
	defer unlock()
	b.mu.Lock()
	j := b.jails[id]
	var err error
	switch {
	case j == nil:
		err = errdefs.NotFound("running sandbox", id)
	case !j.pooled:
		err = errdefs.Invalid("sandbox %s was not started for a warm pool", id)
	case j.attached:
		err = fmt.Errorf("it has a workspace attached already: %w", errdefs.ErrConflict)
	default:
		// Set before the mount: a failed attach may have left half of it,
		// and the jail is then only fit for removal.
		j.attached = true
	}
	b.mu.Unlock()
	if err != nil {
		return fail(err)
	}
	if err := attachWorkspace(filepath.Join(b.stageDir, id, "files"), files); err != nil {
		return fail(err)
	}
	return nil
}

// mountPoolPoint mounts the pool point at p, an empty directory in the
// stage. It is left shared, as a mount made in the shared stage is:
// making it private, even to share it again, would cut off the slave the
// spawner's namespace already holds.
func mountPoolPoint(p string) error {
	if err := unix.Mount(anonmount.Source, p, "tmpfs", unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, poolPointOptions); err != nil {
		return fmt.Errorf("mounting the pool point at %s: %w", p, err)
	}
	return nil
}

// keepPoolPoint is a pooled jail's unstaging, once it runs: every stage
// bind goes but the pool point, whose stage directory is closed to all
// but root (the workspace will be there, and the stage is traversable by
// every user), after a check that what Attach mounts there will reach the
// jail's /workspace.
func (st staged) keepPoolPoint(pid int) error {
	if err := os.Chmod(st.dir, 0o700); err != nil {
		return fmt.Errorf("closing the stage %s: %w", st.dir, err)
	}
	rest := st
	rest.files = ""
	if err := rest.detach(); err != nil {
		return err
	}
	// The emptied entries go too: the stage's inodes are few, and a
	// claimed jail keeps its stage directory as long as it runs.
	for _, name := range stageEntries {
		if name == "files" {
			continue
		}
		if err := os.Remove(filepath.Join(st.dir, name)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("removing stage entry: %w", err)
		}
	}
	return checkAttachable(st.files, pid)
}

// checkAttachable checks that a mount on the pool point p will propagate
// to the /workspace of the jail whose init is pid: p is shared and the
// jail's /workspace is a slave of p's peer group. It also tries the mount
// calls Attach makes, on a clone of the pool point that is dropped. Its
// errors wrap sandbox.ErrNoAttach.
func checkAttachable(p string, pid int) error {
	noAttach := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s", sandbox.ErrNoAttach, fmt.Sprintf(format, args...))
	}
	host, err := mountinfo.At("/proc/self/mountinfo", p)
	if err != nil || len(host) != 1 {
		return noAttach("the pool point %s: %d mounts there (%v)", p, len(host), err)
	}
	group, ok := propagationID(host[0].Propagation, "shared:")
	if !ok {
		return noAttach("the pool point %s is not shared (%s)", p, strings.Join(host[0].Propagation, " "))
	}
	jail, err := mountinfo.At("/proc/"+strconv.Itoa(pid)+"/mountinfo", sandbox.WorkspaceDir)
	if err != nil || len(jail) != 1 {
		return noAttach("the jail's %s: %d mounts there (%v)", sandbox.WorkspaceDir, len(jail), err)
	}
	if master, ok := propagationID(jail[0].Propagation, "master:"); !ok || master != group {
		return noAttach("the jail's %s is not a slave of the pool point's peer group %s (%s)", sandbox.WorkspaceDir, group, strings.Join(jail[0].Propagation, " "))
	}
	fd, err := cloneNosuidNodev(p)
	if err != nil {
		if errors.Is(err, unix.ENOSYS) {
			return noAttach("%v", err)
		}
		return err
	}
	unix.Close(fd)
	return nil
}

// propagationID returns the number of the optional field with prefix
// (shared:, master:).
func propagationID(fields []string, prefix string) (string, bool) {
	i := slices.IndexFunc(fields, func(f string) bool { return strings.HasPrefix(f, prefix) })
	if i < 0 {
		return "", false
	}
	return strings.TrimPrefix(fields[i], prefix), true
}

// cloneNosuidNodev returns a descriptor of a detached clone of the mount
// tree at dir, every mount of it nosuid, nodev and private. Closing the
// descriptor drops the clone unless it was moved somewhere.
func cloneNosuidNodev(dir string) (int, error) {
	fd, err := unix.OpenTree(unix.AT_FDCWD, dir, unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC|unix.AT_RECURSIVE)
	if err != nil {
		return -1, fmt.Errorf("cloning the mounts at %s (open_tree): %w", dir, err)
	}
	attr := unix.MountAttr{Attr_set: unix.MOUNT_ATTR_NOSUID | unix.MOUNT_ATTR_NODEV, Propagation: unix.MS_PRIVATE}
	if err := unix.MountSetattr(fd, "", unix.AT_EMPTY_PATH|unix.AT_RECURSIVE, &attr); err != nil {
		unix.Close(fd)
		return -1, fmt.Errorf("making the clone of %s nosuid,nodev and private (mount_setattr): %w", dir, err)
	}
	return fd, nil
}

// attachWorkspace mounts a nosuid,nodev, private clone of the workspace
// files (their mount tree, submounts included) on the pool point p.
func attachWorkspace(p, files string) error {
	var st unix.Stat_t
	if err := unix.Lstat(p, &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFDIR {
		return fmt.Errorf("pool point %s is missing (not a pooled sandbox, or removed): %w", p, errdefs.ErrNotFound)
	}
	src, err := filepath.EvalSymlinks(files)
	if err != nil {
		return errdefs.Invalid("%v", err)
	}
	if fi, err := os.Stat(src); err != nil || !fi.IsDir() {
		return errdefs.Invalid("workspace %s is not a directory", files)
	}
	fd, err := cloneNosuidNodev(src)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	if err := unix.MoveMount(fd, "", unix.AT_FDCWD, p, unix.MOVE_MOUNT_F_EMPTY_PATH); err != nil {
		return fmt.Errorf("mounting the workspace on the pool point %s (move_mount): %w", p, err)
	}
	return nil
}
