package workspace

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// mountData are ext4's options for a workspace volume. noinit_itable: the
// image's inode tables are holes, which read as zeros already, so the
// kernel's background zeroing would only turn them into real blocks (160
// MiB for 10 GiB). discard: what the workspace deletes goes back to the
// host as holes in the image.
const mountData = "noinit_itable,discard"

// mountImage loop-mounts the ext4 image img at mnt, nosuid,nodev,noatime,
// with the loop device set to clear itself when the mount (its last user)
// goes. It is what mount -o loop does, without a fork, a scan of every
// loop device, or a mount helper.
//
// An image must never be under two loop devices at once: two ext4
// instances on one image corrupt it. One can outlive its unmount, when
// the file system is still held elsewhere (overlayfs keeps a private
// clone of its upper layer's mount until its own super block goes) or
// while the kernel runs down an autocleared device in the background. So,
// as mount(8) does, a device already backed by img is mounted again (the
// same super block, if it lives); one that is going away is waited for.
// When fresh (img was just made) no device can hold it, and none is
// looked for.
func mountImage(img, mnt string, fresh bool) error {
	f, err := os.OpenFile(img, os.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		return err
	}
	for wait := time.Millisecond; !fresh; wait *= 2 {
		dev, ok := loopOf(st)
		if !ok {
			break
		}
		err := unix.Mount(dev, mnt, "ext4", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOATIME, mountData)
		if err == nil {
			return nil
		}
		if wait > 2*time.Second {
			return fmt.Errorf("mounting %s: its loop device %s is still busy: %w", img, dev, err)
		}
		time.Sleep(wait) // the device is being torn down: it goes soon
	}
	ctl, err := os.OpenFile("/dev/loop-control", os.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("loop devices: %w", err)
	}
	defer ctl.Close()
	ld, dev, err := configureLoop(ctl, f, img)
	if err != nil {
		return err
	}
	err = unix.Mount(dev, mnt, "ext4", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOATIME, mountData)
	// Closing our descriptor leaves the mount as the device's only user,
	// or (when the mount failed) no user: autoclear frees it.
	ld.Close()
	if err != nil {
		return fmt.Errorf("mounting %s (%s) at %s: %w", img, dev, mnt, err)
	}
	return nil
}

// loopMu makes this process's loop device setups one at a time: between
// LOOP_CTL_GET_FREE and LOOP_CONFIGURE every concurrent caller would be
// handed the same free device, and all but one would have to retry.
var loopMu sync.Mutex

// configureLoop sets up a free loop device for f (img), autoclearing, and
// returns it open. Another process may still take the free device between
// the two calls: LOOP_CONFIGURE then fails with EBUSY, and the next free
// one is tried.
func configureLoop(ctl, f *os.File, img string) (*os.File, string, error) {
	loopMu.Lock()
	defer loopMu.Unlock()
	for try := range 64 {
		n, err := unix.IoctlRetInt(int(ctl.Fd()), unix.LOOP_CTL_GET_FREE)
		if err != nil {
			return nil, "", fmt.Errorf("finding a free loop device: %w", err)
		}
		dev := "/dev/loop" + strconv.Itoa(n)
		ld, err := openLoop(dev, n)
		if err != nil {
			return nil, "", err
		}
		cfg := unix.LoopConfig{Fd: uint32(f.Fd())}
		cfg.Info.Flags = unix.LO_FLAGS_AUTOCLEAR
		copy(cfg.Info.File_name[:], filepath.Base(img))
		err = unix.IoctlLoopConfigure(int(ld.Fd()), &cfg)
		if err == nil {
			return ld, dev, nil
		}
		ld.Close()
		if !errors.Is(err, unix.EBUSY) {
			return nil, "", fmt.Errorf("setting up %s for %s: %w", dev, img, err)
		}
		time.Sleep(time.Duration(try+1) * time.Millisecond)
	}
	return nil, "", fmt.Errorf("mounting %s: every free loop device was taken by another process, 64 times", img)
}

// loopOf finds the loop device whose backing file is the file st
// describes.
func loopOf(st unix.Stat_t) (string, bool) {
	devs, _ := filepath.Glob("/sys/block/loop*")
	for _, d := range devs {
		b, err := os.ReadFile(filepath.Join(d, "loop", "backing_file"))
		if err != nil {
			continue // not configured
		}
		var bst unix.Stat_t
		name := strings.TrimSuffix(strings.TrimSpace(string(b)), " (deleted)")
		if unix.Stat(name, &bst) == nil && bst.Dev == st.Dev && bst.Ino == st.Ino {
			return "/dev/" + filepath.Base(d), true
		}
	}
	return "", false
}

// openLoop opens loop device n, making its node when the host's /dev does
// not (a /dev that is not devtmpfs).
func openLoop(dev string, n int) (*os.File, error) {
	ld, err := os.OpenFile(dev, os.O_RDWR|unix.O_CLOEXEC, 0)
	if errors.Is(err, os.ErrNotExist) {
		if err := unix.Mknod(dev, unix.S_IFBLK|0o660, int(unix.Mkdev(7, uint32(n)))); err != nil && !errors.Is(err, unix.EEXIST) {
			return nil, fmt.Errorf("making %s: %w", dev, err)
		}
		ld, err = os.OpenFile(dev, os.O_RDWR|unix.O_CLOEXEC, 0)
	}
	if err != nil {
		return nil, fmt.Errorf("opening %s: %w", dev, err)
	}
	return ld, nil
}

// copySparse copies src to a new file dst, holes kept as holes (a
// formatted, empty 10 GiB image holds about 240 KiB of data). The byte
// ranges in skip (sorted, not overlapping) are left as holes too.
func copySparse(src, dst string, skip ...span) (err error) {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	st, err := in.Stat()
	if err != nil {
		return err
	}
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_EXCL|os.O_WRONLY|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return err
	}
	defer func() {
		if cerr := out.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			os.Remove(dst)
		}
	}()
	if err := out.Truncate(st.Size()); err != nil {
		return err
	}
	size := st.Size()
	for off := int64(0); off < size; {
		data, err := unix.Seek(int(in.Fd()), off, unix.SEEK_DATA)
		if errors.Is(err, unix.ENXIO) {
			break // only a hole is left
		}
		if err != nil {
			return err
		}
		hole, err := unix.Seek(int(in.Fd()), data, unix.SEEK_HOLE)
		if err != nil {
			return err
		}
		for _, r := range without(span{data, hole}, skip) {
			if _, err := in.Seek(r.off, io.SeekStart); err != nil {
				return err
			}
			if _, err := out.Seek(r.off, io.SeekStart); err != nil {
				return err
			}
			if _, err := io.CopyN(out, in, r.end-r.off); err != nil {
				return err
			}
		}
		off = hole
	}
	return nil
}

// without is r less the ranges in skip (sorted, not overlapping).
func without(r span, skip []span) []span {
	var out []span
	for _, s := range skip {
		if s.end <= r.off || s.off >= r.end {
			continue
		}
		if s.off > r.off {
			out = append(out, span{r.off, s.off})
		}
		r.off = max(r.off, s.end)
		if r.off >= r.end {
			return out
		}
	}
	return append(out, r)
}
