package anonmount

import (
	"errors"
	"fmt"
	"path/filepath"
	"runtime"
	"strings"

	"golang.org/x/sys/unix"
)

// Overlay mounts an overlay at dir/merged of the read-only layer lower
// under the writable layer dir/upper, with dir/work as overlayfs's work
// directory, with flags and the further options data (comma-separated,
// may be empty). upper, work and merged are names in dir. The mount's
// entry reads "lowerdir=/,upperdir=UPPER,workdir=WORK,DATA": the layers
// are resolved from a thread whose root is lower and whose working
// directory is dir, and overlayfs keeps the names as given. So neither
// lower nor dir need be free of the ',' and ':' that the option string
// cannot carry.
func Overlay(lower, dir, upper, work, merged string, flags uintptr, data string) error {
	for _, n := range []string{upper, work, merged} {
		if n == "" || n == "." || n == ".." || strings.ContainsAny(n, "/,:\\") {
			return fmt.Errorf("overlay at %s: %q is not a plain name", dir, n)
		}
	}
	opts := "lowerdir=/,upperdir=" + upper + ",workdir=" + work
	if data != "" {
		opts += "," + data
	}
	err := OnPrivateThread(func() error {
		d, err := unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if err != nil {
			return err
		}
		defer unix.Close(d)
		if err := unix.Chroot(lower); err != nil {
			return fmt.Errorf("lower layer %s: %w", lower, err)
		}
		if err := unix.Fchdir(d); err != nil {
			return err
		}
		return unix.Mount("overlay", merged, "overlay", flags, opts)
	})
	if err != nil {
		return fmt.Errorf("mounting overlay at %s: %w", filepath.Join(dir, merged), err)
	}
	return nil
}

// View mounts at target, an empty directory, a read-only view of the
// directory src: an overlay of src over an empty tmpfs, whose entry reads
// "lowerdir=/:.". A file bound from it shows as "/NAME", its name in src.
// Symbolic links in src are shown as they are: resolve the file to bind
// before. Two mounts are stacked at target: Detach takes both.
func View(target, src string) error {
	// An overlay without an upper layer needs two lower ones. The second
	// is an empty tmpfs mounted at target first, which the overlay then
	// covers: a directory of its own that nothing ever removes (a removed
	// layer lists as empty), however long a sandbox keeps the view after
	// target has left the host.
	if err := unix.Mount(Source, target, "tmpfs", unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "mode=0555,size=4k,nr_inodes=2"); err != nil {
		return fmt.Errorf("mounting a view of %s at %s: %w", src, target, err)
	}
	err := OnPrivateThread(func() error {
		t, err := unix.Open(target, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != nil {
			return err
		}
		defer unix.Close(t)
		if err := unix.Chroot(src); err != nil {
			return fmt.Errorf("%s: %w", src, err)
		}
		if err := unix.Fchdir(t); err != nil {
			return err
		}
		return unix.Mount(Source, ".", "overlay", unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV, "lowerdir=/:.")
	})
	if err != nil {
		Detach(target)
		return fmt.Errorf("mounting a view of %s at %s: %w", src, target, err)
	}
	return nil
}

// Tmpfs mounts at dir a tmpfs of at most size bytes and inodes files,
// nosuid, nodev and noexec, whose root has the mode and owner dir had.
func Tmpfs(dir string, size, inodes int64) error {
	var st unix.Stat_t
	if err := unix.Lstat(dir, &st); err != nil {
		return fmt.Errorf("mounting a tmpfs at %s: %w", dir, err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFDIR {
		return fmt.Errorf("mounting a tmpfs at %s: not a directory", dir)
	}
	opts := fmt.Sprintf("mode=%#o,uid=%d,gid=%d,size=%d,nr_inodes=%d", st.Mode&0o7777, st.Uid, st.Gid, size, inodes)
	if err := unix.Mount(Source, dir, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, opts); err != nil {
		return fmt.Errorf("mounting a tmpfs at %s: %w", dir, err)
	}
	return nil
}

// Detach unmounts everything mounted at path, lazily: whatever holds a
// copy of a mount (a sandbox's bind) keeps it. Nothing mounted there is
// not an error.
func Detach(path string) error {
	for range 8 {
		err := unix.Unmount(path, unix.MNT_DETACH|unix.UMOUNT_NOFOLLOW)
		if errors.Is(err, unix.EINVAL) || errors.Is(err, unix.ENOENT) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("unmounting %s: %w", path, err)
		}
	}
	return fmt.Errorf("unmounting %s: still mounted after 8 unmounts", path)
}

// OnPrivateThread runs fn on an OS thread whose root and working
// directory, or mount namespace, fn may change: the thread leaves the file system context it
// shares with the rest of the process (unshare CLONE_FS), and is never
// handed back to the Go runtime, which ends it with its goroutine. Threads
// the runtime starts meanwhile come from its template thread, never from
// a locked one, so they do not inherit the change either.
//
// The main thread is never used: the runtime keeps it rather than ending
// it, and /proc/self is its directory, so a root changed there would
// change every later read of /proc/self/mountinfo by this process.
func OnPrivateThread(fn func() error) error {
	ch := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		if unix.Gettid() == unix.Getpid() {
			// Holding the main thread, the goroutine started now cannot
			// run on it.
			ch <- OnPrivateThread(fn)
			runtime.UnlockOSThread()
			return
		}
		if err := unix.Unshare(unix.CLONE_FS); err != nil {
			ch <- fmt.Errorf("unsharing the thread's root and working directory: %w", err)
			return
		}
		ch <- fn()
	}()
	return <-ch
}
