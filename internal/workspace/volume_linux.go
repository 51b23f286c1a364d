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
// formats it and mounts it at dir/vol.
func makeVolume(ctx context.Context, dir string, size int64) error {
	if size < MinQuota {
		return errdefs.Invalid("disk quota %d bytes is under the minimum of %d", size, MinQuota)
	}
	img := VolumeImage(dir)
	f, err := os.OpenFile(img, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		return fmt.Errorf("creating disk image: %w", err)
	}
	err = f.Truncate(size)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("sizing disk image %s: %w", img, err)
	}
	// -m 0: no blocks reserved for root (the quota is all the workspace's);
	// lazy init: formatting costs the same for 1 GiB or 100 GiB, the
	// kernel zeroes inode tables in the background.
	if err := run(ctx, "mkfs.ext4", "-q", "-F", "-m", "0", "-L", "agentbox-ws",
		"-E", "lazy_itable_init=1,lazy_journal_init=1", img); err != nil {
		return fmt.Errorf("formatting disk image %s: %w", img, err)
	}
	if err := os.Mkdir(filepath.Join(dir, volumeMount), 0o755); err != nil {
		return err
	}
	return mountVolume(ctx, dir)
}

// ProbeVolume reports whether quota volumes work in scratch (the
// directory that holds workspaces): mkfs.ext4, a loop device, a mount.
func ProbeVolume(ctx context.Context, scratch string) error {
	dir, err := os.MkdirTemp(scratch, ".volume-probe-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	if err := makeVolume(ctx, dir, MinQuota); err != nil {
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
	if err := run(ctx, "mount", "-t", "ext4", "-o", "loop,nosuid,nodev,noatime", img, mnt); err != nil {
		return fmt.Errorf("mounting disk image %s: %w", img, err)
	}
	return nil
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
	inner Driver
	quota int64
}

// WithQuota returns d keeping each workspace's files inside a file system
// of quota bytes; d itself when quota is 0.
func WithQuota(d Driver, quota int64) Driver {
	if quota <= 0 {
		return d
	}
	return quotaDriver{inner: d, quota: quota}
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
	if err := makeVolume(ctx, dir, q.quota); err != nil {
		return err
	}
	return q.inner.Create(ctx, filepath.Join(dir, volumeMount), src)
}

func (q quotaDriver) Fork(ctx context.Context, parentDir, dir string, src Source) error {
	if err := makeVolume(ctx, dir, q.quota); err != nil {
		return err
	}
	err := q.inner.Fork(ctx, parentDir, filepath.Join(dir, volumeMount), src)
	if errors.Is(err, unix.ENOSPC) || errors.Is(err, unix.EDQUOT) {
		return errdefs.Invalid("the parent's files do not fit in a disk quota of %d bytes: %v", q.quota, err)
	}
	return err
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
