package workspace

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/internal/errdefs"
)

// makeVolume creates the sparse image of size bytes in dir (which exists),
// formatted, and mounts it at dir/vol. The image is a copy of a template
// formatted once per size (see volumeTemplate): copying its few hundred
// KiB of metadata costs a fraction of mkfs.
func makeVolume(ctx context.Context, dir, templates string, size int64) error {
	if size < MinQuota {
		return errdefs.Invalid("disk quota %d bytes is under the minimum of %d", size, MinQuota)
	}
	if templates == "" {
		return fmt.Errorf("making the disk of %s: no directory for volume templates", dir)
	}
	tpl, err := volumeTemplate(ctx, templates, size)
	if err != nil {
		return err
	}
	img := VolumeImage(dir)
	if err := copySparse(tpl, img); err != nil {
		return fmt.Errorf("creating disk image %s: %w", img, err)
	}
	mnt := filepath.Join(dir, volumeMount)
	if err := os.Mkdir(mnt, 0o755); err != nil {
		return err
	}
	// A file just made is under no loop device: no need to look for one.
	return mountImage(img, mnt, true)
}

// volumeTemplate returns the formatted, empty image of size bytes in dir,
// making it first if needed. The image holds no data, so
// every workspace may start from a copy (all then share one file system
// UUID, which ext4 does not mind). Made under a temporary name and
// renamed, so a crash never leaves a half-made template behind that name.
func volumeTemplate(ctx context.Context, dir string, size int64) (string, error) {
	// v2: without resize_inode, whose reserved descriptor blocks were 4
	// MiB of every image, copied by every create and fork; a volume never
	// grows.
	p := filepath.Join(dir, fmt.Sprintf("ext4-v2-%d.img", size))
	if _, err := os.Stat(p); err == nil {
		return p, nil
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", err
	}
	f, err := os.CreateTemp(dir, ".tmp-*.img")
	if err != nil {
		return "", err
	}
	tmp := f.Name()
	defer os.Remove(tmp)
	err = f.Truncate(size)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return "", fmt.Errorf("sizing disk image template: %w", err)
	}
	// -m 0: no blocks reserved for root (the quota is all the workspace's);
	// lazy init: the inode tables and journal stay holes.
	if err := run(ctx, "mkfs.ext4", "-q", "-F", "-m", "0", "-L", "agentbox-ws", "-O", "^resize_inode",
		"-E", "lazy_itable_init=1,lazy_journal_init=1", tmp); err != nil {
		return "", fmt.Errorf("formatting a disk image template: %w", err)
	}
	if err := syncFile(tmp); err != nil {
		return "", err
	}
	if err := os.Rename(tmp, p); err != nil {
		return "", err
	}
	// The first template's name, made by daemons before v2, serves
	// nothing now.
	os.Remove(filepath.Join(dir, fmt.Sprintf("ext4-%d.img", size)))
	return p, syncDir(dir)
}

func syncFile(p string) error {
	f, err := os.Open(p)
	if err != nil {
		return err
	}
	defer f.Close()
	return f.Sync()
}

// ProbeVolume reports whether quota volumes work in scratch (the
// directory that holds workspaces): mkfs.ext4, a loop device, a mount.
func ProbeVolume(ctx context.Context, scratch, templates string) error {
	dir, err := os.MkdirTemp(scratch, ".volume-probe-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	if err := makeVolume(ctx, dir, templates, MinQuota); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, volumeMount, "x"), []byte("x"), 0o600); err != nil {
		unmountVolume(dir)
		return fmt.Errorf("writing to a quota volume: %w", err)
	}
	return unmountVolume(dir)
}

// volumeMounted reports whether dir/vol is a mount point (its device
// differs from dir's).
func volumeMounted(dir string) (bool, error) {
	var parent, vol unix.Stat_t
	if err := unix.Lstat(dir, &parent); err != nil {
		if errors.Is(err, unix.ENOENT) {
			return false, nil
		}
		return false, fmt.Errorf("checking the volume of %s: %w", dir, err)
	}
	if err := unix.Lstat(filepath.Join(dir, volumeMount), &vol); err != nil {
		if errors.Is(err, unix.ENOENT) {
			return false, nil
		}
		return false, fmt.Errorf("checking the volume of %s: %w", dir, err)
	}
	return vol.Dev != parent.Dev, nil
}

// mountVolume mounts dir's image at dir/vol unless it is mounted. The loop
// device is set up with autoclear, so it goes with the last unmount.
func mountVolume(ctx context.Context, dir string) error {
	if ok, err := volumeMounted(dir); err != nil || ok {
		return err
	}
	img, mnt := VolumeImage(dir), filepath.Join(dir, volumeMount)
	if err := os.Mkdir(mnt, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
		return err
	}
	return mountImage(img, mnt, false)
}

// unmountVolume unmounts dir/vol if it is mounted; lazily when something
// (a sandbox's bind mount, a shell) still holds it, which is safe: the
// files stay in the image.
func unmountVolume(dir string) error {
	mnt := filepath.Join(dir, volumeMount)
	for range 3 {
		ok, err := volumeMounted(dir)
		if err != nil || !ok {
			return err
		}
		err = unix.Unmount(mnt, 0)
		if errors.Is(err, unix.EBUSY) {
			err = unix.Unmount(mnt, unix.MNT_DETACH)
		}
		if err != nil && !errors.Is(err, unix.EINVAL) {
			return fmt.Errorf("unmounting %s: %w", mnt, err)
		}
	}
	return nil
}

// VolumeUsage reports the usage of the mounted volume of the workspace at
// dir.
func VolumeUsage(dir string) (Usage, error) {
	st, err := os.Stat(VolumeImage(dir))
	if err != nil {
		return Usage{}, err
	}
	if ok, err := volumeMounted(dir); err != nil || !ok {
		return Usage{}, fmt.Errorf("the disk of workspace %s is not mounted: %w", dir, errdefs.ErrUnavailable)
	}
	var fs unix.Statfs_t
	if err := unix.Statfs(filepath.Join(dir, volumeMount), &fs); err != nil {
		return Usage{}, err
	}
	bs := fs.Bsize
	return Usage{
		Quota: st.Size(), Used: int64(fs.Blocks-fs.Bfree) * bs, Free: int64(fs.Bavail) * bs,
		Files: int64(fs.Files - fs.Ffree), FilesFree: int64(fs.Ffree),
	}, nil
}

func run(ctx context.Context, name string, args ...string) error {
	cmd := exec.CommandContext(ctx, name, args...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		msg := strings.TrimSpace(out.String())
		if msg == "" {
			return fmt.Errorf("%s: %w", name, err)
		}
		return fmt.Errorf("%s: %w: %s", name, err, msg)
	}
	return nil
}

// quotaDriver keeps a driver's layout inside a volume of quota bytes.
type quotaDriver struct {
	inner     Driver
	quota     int64
	templates string
}

// WithQuota returns d keeping each workspace's files inside a file system
// of quota bytes; d itself when quota is 0. New volumes are copies of
// formatted templates kept in the directory templates (made when needed;
// "" only serves workspaces that exist).
func WithQuota(d Driver, quota int64, templates string) Driver {
	if quota <= 0 {
		return d
	}
	return quotaDriver{inner: d, quota: quota, templates: templates}
}

func (q quotaDriver) Name() string { return q.inner.Name() }

// Files is inside the volume; the path does not depend on it being mounted.
func (q quotaDriver) Files(dir string) string {
	return q.inner.Files(filepath.Join(dir, volumeMount))
}

func (q quotaDriver) Create(ctx context.Context, dir string, src Source) error {
	if q.inner.Name() == Overlay && src.Lower == "" {
		return errdefs.Invalid("overlay workspace needs a pristine checkout")
	}
	if err := makeVolume(ctx, dir, q.templates, q.quota); err != nil {
		return err
	}
	return q.inner.Create(ctx, filepath.Join(dir, volumeMount), src)
}

// forkFinisher is a driver that can finish a fork whose layout at dir is
// already a copy of the parent's: set the branch, mount the files.
type forkFinisher interface {
	finishFork(ctx context.Context, dir string, src Source) error
}

// snapshotMinFiles is the number of files (inodes in use, directories
// included; a fresh volume holds about 20) from which a fork copies the
// parent's volume image rather than its files. A snapshot of a parent
// that takes no write meanwhile (a quiet one, the usual case) costs about
// 3 ms whatever the parent holds, and mounting the copy about 4 ms; a
// file-by-file copy costs about 1 ms for a new volume and 0.05 ms per
// inode (agentbox bench workspace, go test -bench QuotaFork). A parent
// written to during the fork is frozen for the copy instead, which waits
// for three RCU grace periods: about 24 ms more on this machine's kernel,
// under 1 ms when the host sets /sys/kernel/rcu_expedited.
const snapshotMinFiles = 64

// Fork copies the parent's volume image, one instant of it (see
// snapshotVolume), when it has one of the same size holding at least
// snapshotMinFiles files; otherwise it makes a new volume and copies the
// parent's layout into it file by file.
func (q quotaDriver) Fork(ctx context.Context, parentDir, dir string, src Source) error {
	if f, ok := q.inner.(forkFinisher); ok && q.sameSize(parentDir) {
		if err := mountVolume(ctx, parentDir); err != nil {
			return err
		}
		var fs unix.Statfs_t
		if err := unix.Statfs(filepath.Join(parentDir, volumeMount), &fs); err != nil {
			return err
		}
		if fs.Files-fs.Ffree >= snapshotMinFiles {
			return q.forkImage(ctx, f, parentDir, dir, src)
		}
	}
	if err := makeVolume(ctx, dir, q.templates, q.quota); err != nil {
		return err
	}
	err := q.inner.Fork(ctx, parentDir, filepath.Join(dir, volumeMount), src)
	if errors.Is(err, unix.ENOSPC) || errors.Is(err, unix.EDQUOT) {
		return errdefs.Invalid("the parent's files do not fit in a disk quota of %d bytes: %v", q.quota, err)
	}
	return err
}

// forkImage makes dir's volume a snapshot of the parent's and finishes
// the fork in it.
func (q quotaDriver) forkImage(ctx context.Context, f forkFinisher, parentDir, dir string, src Source) error {
	img := VolumeImage(dir)
	if err := snapshotVolume(parentDir, img); err != nil {
		return err
	}
	mnt := filepath.Join(dir, volumeMount)
	if err := os.Mkdir(mnt, 0o755); err != nil {
		return err
	}
	// A file just made is under no loop device.
	if err := mountImage(img, mnt, true); err != nil {
		return err
	}
	return f.finishFork(ctx, mnt, src)
}

// sameSize reports whether the workspace at dir has a volume of q's size.
func (q quotaDriver) sameSize(dir string) bool {
	st, err := os.Lstat(VolumeImage(dir))
	return err == nil && st.Mode().IsRegular() && st.Size() == q.quota
}

func (q quotaDriver) Attach(ctx context.Context, dir, lower string) error {
	if err := mountVolume(ctx, dir); err != nil {
		return err
	}
	return q.inner.Attach(ctx, filepath.Join(dir, volumeMount), lower)
}

func (q quotaDriver) Detach(ctx context.Context, dir string) error {
	if err := q.inner.Detach(ctx, filepath.Join(dir, volumeMount)); err != nil {
		return err
	}
	return unmountVolume(dir)
}

func (q quotaDriver) Attached(dir string) (bool, error) {
	if ok, err := volumeMounted(dir); err != nil || !ok {
		return false, err
	}
	return q.inner.Attached(filepath.Join(dir, volumeMount))
}
