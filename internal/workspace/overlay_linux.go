package workspace

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/internal/anonmount"
	"github.com/agentbox/agentbox/internal/errdefs"
	"github.com/agentbox/agentbox/internal/mountinfo"
)

// overlayDriver stacks each workspace's own upper layer on a shared,
// read-only pristine checkout. Creation is a mount and a few small files,
// whatever the size of the repo; a fork copies only the upper layer.
type overlayDriver struct{}

func (overlayDriver) Name() string            { return Overlay }
func (overlayDriver) Files(dir string) string { return filepath.Join(dir, "merged") }

func (d overlayDriver) Create(ctx context.Context, dir string, src Source) error {
	if src.Lower == "" {
		return errdefs.Invalid("overlay workspace needs a pristine checkout")
	}
	for _, sub := range []string{"upper", "work", "merged"} {
		if err := os.Mkdir(filepath.Join(dir, sub), 0o755); err != nil {
			return err
		}
	}
	// The upper root's owner is the owner of the workspace root as seen
	// through the mount.
	if src.UID >= 0 {
		if err := os.Lchown(filepath.Join(dir, "upper"), src.UID, src.GID); err != nil {
			return err
		}
	}
	// The branch goes straight into the upper layer before the mount: no
	// one can see these files yet, so plain writes are safe, and it saves
	// the round trips of writing through the mount.
	if src.Branch != "" {
		if err := writeBranchUpper(filepath.Join(dir, "upper"), src.Branch, src.Commit, src.UID, src.GID); err != nil {
			return fmt.Errorf("writing branch %s: %w", src.Branch, err)
		}
	}
	return d.Attach(ctx, dir, src.Lower)
}

func (d overlayDriver) Fork(ctx context.Context, parentDir, dir string, src Source) error {
	if err := os.Mkdir(filepath.Join(dir, "work"), 0o755); err != nil {
		return err
	}
	if err := os.Mkdir(filepath.Join(dir, "merged"), 0o755); err != nil {
		return err
	}
	// The parent's layout is inside its volume when it has a quota.
	if err := copyTree(ctx, filepath.Join(filesRoot(parentDir), "upper"), filepath.Join(dir, "upper")); err != nil {
		return err
	}
	return d.finishFork(ctx, dir, src)
}

// finishFork sets the branch of a fork whose upper layer at dir is a copy
// of the parent's, and mounts it.
func (d overlayDriver) finishFork(ctx context.Context, dir string, src Source) error {
	if src.Branch != "" && src.Commit != "" {
		if err := writeBranchUpper(filepath.Join(dir, "upper"), src.Branch, src.Commit, src.UID, src.GID); err != nil {
			return fmt.Errorf("writing branch %s: %w", src.Branch, err)
		}
	}
	return d.Attach(ctx, dir, src.Lower)
}

// overlayOptions are the options of every workspace overlay besides its
// layers: index=off and metacopy=off keep the upper layer self-contained,
// so a fork can copy it and mount it over the same lower layer.
const overlayOptions = "index=off,metacopy=off"

func (d overlayDriver) Attach(ctx context.Context, dir, lower string) error {
	merged := d.Files(dir)
	if ok, err := d.Attached(dir); err != nil || ok {
		return err
	}
	if _, err := os.Stat(lower); err != nil {
		return fmt.Errorf("mounting %s: lower layer %s: %w", merged, lower, errdefs.ErrUnavailable)
	}
	// The layers are named so that the mount table, which a sandbox can
	// read, shows "lowerdir=/,upperdir=upper,workdir=work" and no host
	// path (SECURITY.md H45). Nothing reads the names back: the
	// reconciler and the collector match mounts by mount point.
	return anonmount.Overlay(lower, dir, "upper", "work", "merged", unix.MS_NOSUID|unix.MS_NODEV, overlayOptions)
}

func (d overlayDriver) Detach(ctx context.Context, dir string) error {
	merged := d.Files(dir)
	for range 3 {
		ok, err := d.Attached(dir)
		if err != nil || !ok {
			return err
		}
		err = unix.Unmount(merged, 0)
		if errors.Is(err, unix.EBUSY) {
			// Something still holds it (a sandbox's bind mount, a shell);
			// detach lazily: the files stay in upper, nothing is lost.
			err = unix.Unmount(merged, unix.MNT_DETACH)
		}
		if err != nil && !errors.Is(err, unix.EINVAL) {
			return fmt.Errorf("unmounting %s: %w", merged, err)
		}
	}
	return nil
}

// Attached compares device numbers: a mounted overlay has its own, while a
// bare mount point shares its parent's. Unlike a scan of mountinfo this
// costs the same with ten mounts or ten thousand, and it runs on every
// request.
func (d overlayDriver) Attached(dir string) (bool, error) {
	var parent, merged unix.Stat_t
	if err := unix.Lstat(dir, &parent); err != nil {
		if errors.Is(err, unix.ENOENT) {
			return false, nil
		}
		return false, fmt.Errorf("checking the mount of %s: %w", dir, err)
	}
	if err := unix.Lstat(d.Files(dir), &merged); err != nil {
		if errors.Is(err, unix.ENOENT) {
			return false, nil
		}
		return false, fmt.Errorf("checking the mount of %s: %w", dir, err)
	}
	return merged.Dev != parent.Dev, nil
}

// IsMountPoint reports whether path is a mount point in this mount
// namespace.
func IsMountPoint(path string) (bool, error) { return mountinfo.IsMountPoint(path) }

// ProbeOverlay reports whether overlay mounts work in scratch (a directory
// on the file system that will hold workspaces).
func ProbeOverlay(scratch string) error {
	dir, err := os.MkdirTemp(scratch, ".overlay-probe-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	for _, sub := range []string{"lower", "upper", "work", "merged"} {
		if err := os.Mkdir(filepath.Join(dir, sub), 0o755); err != nil {
			return err
		}
	}
	d := overlayDriver{}
	if err := d.Attach(context.Background(), dir, filepath.Join(dir, "lower")); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "merged", "x"), []byte("x"), 0o644); err != nil {
		d.Detach(context.Background(), dir)
		return fmt.Errorf("writing through overlay: %w", err)
	}
	return d.Detach(context.Background(), dir)
}

// writeBranchUpper writes .git/refs/heads/BRANCH and .git/HEAD into an
// upper layer that is not mounted yet, durably, owned by uid:gid. The
// layer may be a fork's copy of sandbox-written content: every directory
// on the way must be a real directory, and files are replaced by rename,
// never written through (a symlink planted as .git/HEAD is replaced).
func writeBranchUpper(upper, branch, commit string, uid, gid int) error {
	files := []struct{ rel, content string }{
		{filepath.Join(".git", "refs", "heads", filepath.FromSlash(branch)), commit + "\n"},
		{filepath.Join(".git", "HEAD"), "ref: refs/heads/" + branch + "\n"},
	}
	dirs := map[string]bool{}
	for _, f := range files {
		full := filepath.Join(upper, f.rel)
		// Directories made here show through the mount with these
		// attributes, so they must match the checkout's (owner, 0755).
		for d := filepath.Dir(full); d != upper; d = filepath.Dir(d) {
			dirs[d] = true
		}
		if err := mkdirOwned(upper, filepath.Dir(full), uid, gid); err != nil {
			return err
		}
		tmp := full + ".agentbox-new"
		os.Remove(tmp)
		fd, err := os.OpenFile(tmp, os.O_CREATE|os.O_EXCL|os.O_WRONLY|unix.O_NOFOLLOW, 0o644)
		if err != nil {
			return err
		}
		_, err = fd.WriteString(f.content)
		if err == nil && uid >= 0 {
			err = fd.Chown(uid, gid)
		}
		if err == nil {
			err = fd.Sync()
		}
		if cerr := fd.Close(); err == nil {
			err = cerr
		}
		if err == nil {
			err = os.Rename(tmp, full)
		}
		if err != nil {
			os.Remove(tmp)
			return err
		}
	}
	dirs[upper] = true
	for d := range dirs {
		if err := syncDir(d); err != nil {
			return err
		}
	}
	return nil
}

// mkdirOwned makes dir and its missing parents below upper, 0755, owned
// by uid:gid when uid >= 0.
func mkdirOwned(upper, dir string, uid, gid int) error {
	if dir == upper {
		return nil
	}
	// Parents first, so that each Lstat below sees real directories only.
	if err := mkdirOwned(upper, filepath.Dir(dir), uid, gid); err != nil {
		return err
	}
	if st, err := os.Lstat(dir); err == nil {
		if !st.IsDir() {
			return fmt.Errorf("%s is not a directory", dir)
		}
		return nil
	}
	if err := os.Mkdir(dir, 0o755); err != nil {
		return err
	}
	if uid >= 0 {
		return os.Lchown(dir, uid, gid)
	}
	return nil
}

func syncDir(dir string) error {
	f, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer f.Close()
	return f.Sync()
}
