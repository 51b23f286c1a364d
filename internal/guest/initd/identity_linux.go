package initd

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"syscall"
	"unsafe"

	"github.com/creack/pty"
	"golang.org/x/sys/unix"
)

// guestCaps are the capabilities the guest keeps when its commands run as
// another user: CAP_SETUID and CAP_SETGID to start reapers as that user,
// CAP_KILL to signal the reapers and whatever a command leaves behind.
// Nothing the guest starts inherits them (see BecomeGuest).
var guestCaps = []int{unix.CAP_SETUID, unix.CAP_SETGID, unix.CAP_KILL}

// BecomeGuest makes the guest its own user self, apart from the user its
// commands run as, keeping only guestCaps. A backend starts the guest
// either as root with those capabilities and CAP_SETPCAP (Docker, gVisor:
// an OCI runtime grants a non-root user none), or already as self with
// them ambient (bubblewrap). Either way the guest ends as self with
// guestCaps permitted and effective, nothing inheritable or ambient, and
// an empty bounding set: a reaper it starts as the commands' user has no
// capability once it executes, and no way to regain one.
//
// Credentials are per thread in Linux and the Go runtime has several, so
// every change is made on all of them (syscall.AllThreadsSyscall, which
// the guest, built without cgo, can use).
func BecomeGuest(self User) error {
	if os.Getuid() == 0 {
		// Across the change of user, keep the permitted set.
		if err := allThreads(unix.PR_SET_KEEPCAPS, 1); err != nil {
			return fmt.Errorf("PR_SET_KEEPCAPS: %w", err)
		}
		if err := syscall.Setgroups(nil); err != nil {
			return fmt.Errorf("dropping supplementary groups: %w", err)
		}
		if err := syscall.Setresgid(self.GID, self.GID, self.GID); err != nil {
			return fmt.Errorf("becoming group %d: %w", self.GID, err)
		}
		if err := syscall.Setresuid(self.UID, self.UID, self.UID); err != nil {
			return fmt.Errorf("becoming user %d: %w", self.UID, err)
		}
		if err := allThreads(unix.PR_SET_KEEPCAPS, 0); err != nil {
			return fmt.Errorf("PR_SET_KEEPCAPS: %w", err)
		}
	}
	if uid, gid := os.Getuid(), os.Getgid(); uid != self.UID || gid != self.GID {
		return fmt.Errorf("the guest runs as %d:%d, want %s", uid, gid, self)
	}
	// CAP_SETPCAP, effective for as long as the bounding set takes.
	if err := setCaps(append([]int{unix.CAP_SETPCAP}, guestCaps...)); err != nil {
		return fmt.Errorf("the guest lacks the capabilities to run commands as another user: %w", err)
	}
	// gVisor 2022 has no ambient set (EINVAL): nothing to clear there.
	if _, _, e := syscall.AllThreadsSyscall6(unix.SYS_PRCTL, unix.PR_CAP_AMBIENT, unix.PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0, 0); e != 0 && e != unix.EINVAL {
		return fmt.Errorf("clearing the ambient capabilities: %w", e)
	}
	for c := 0; c < 64; c++ {
		if err := allThreads(unix.PR_CAPBSET_DROP, uintptr(c)); errors.Is(err, unix.EINVAL) {
			break // past the kernel's last capability
		} else if err != nil {
			return fmt.Errorf("dropping capability %d from the bounding set: %w", c, err)
		}
	}
	if err := setCaps(guestCaps); err != nil {
		return fmt.Errorf("dropping CAP_SETPCAP: %w", err)
	}
	return checkCaps()
}

// keepCapsAcrossExec makes the calling thread of a guest running as root
// keep its permitted capabilities through an execve: an image executed
// as root starts with its inheritable set and its bounding set, so the
// first becomes the permitted set and the second is emptied (Linux and
// gVisor alike). The caller executes from this thread, locked.
func keepCapsAcrossExec() error {
	if os.Getuid() != 0 {
		return fmt.Errorf("the guest is %d, not root, and would lose its capabilities", os.Getuid())
	}
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		return fmt.Errorf("capget: %w", err)
	}
	// While the bounding set still allows it.
	data[0].Inheritable, data[1].Inheritable = data[0].Permitted, data[1].Permitted
	if _, _, e := syscall.RawSyscall(unix.SYS_CAPSET, uintptr(unsafe.Pointer(&hdr)), uintptr(unsafe.Pointer(&data[0])), 0); e != 0 {
		return fmt.Errorf("keeping capabilities across execve: %w", e)
	}
	for c := 0; c < 64; c++ {
		if _, _, e := syscall.RawSyscall6(unix.SYS_PRCTL, unix.PR_CAPBSET_DROP, uintptr(c), 0, 0, 0, 0); e == unix.EINVAL {
			break
		} else if e != 0 {
			return fmt.Errorf("dropping capability %d from the bounding set: %w", c, e)
		}
	}
	return nil
}

// allThreads is prctl(option, arg) on every thread.
func allThreads(option int, arg uintptr) error {
	if _, _, e := syscall.AllThreadsSyscall6(unix.SYS_PRCTL, uintptr(option), arg, 0, 0, 0, 0); e != 0 {
		return e
	}
	return nil
}

// setCaps makes caps the permitted and effective sets of every thread,
// with nothing inheritable.
func setCaps(caps []int) error {
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	for _, c := range caps {
		data[c/32].Permitted |= 1 << (c % 32)
		data[c/32].Effective |= 1 << (c % 32)
	}
	if _, _, e := syscall.AllThreadsSyscall(unix.SYS_CAPSET, uintptr(unsafe.Pointer(&hdr)), uintptr(unsafe.Pointer(&data[0])), 0); e != 0 {
		return e
	}
	return nil
}

// checkCaps checks, on this thread, what BecomeGuest promises: trust the
// kernel's (or the runtime's) answer, not the calls' return values.
func checkCaps() error {
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		return fmt.Errorf("capget: %w", err)
	}
	var want uint64
	for _, c := range guestCaps {
		want |= 1 << c
	}
	eff := uint64(data[0].Effective) | uint64(data[1].Effective)<<32
	prm := uint64(data[0].Permitted) | uint64(data[1].Permitted)<<32
	inh := uint64(data[0].Inheritable) | uint64(data[1].Inheritable)<<32
	if eff != want || prm != want || inh != 0 {
		return fmt.Errorf("capabilities effective %#x, permitted %#x, inheritable %#x; want %#x, %#x, 0", eff, prm, inh, want, want)
	}
	for c := 0; c < 64; c++ {
		in, err := unix.PrctlRetInt(unix.PR_CAPBSET_READ, uintptr(c), 0, 0, 0)
		if err != nil {
			break
		}
		if in != 0 {
			return fmt.Errorf("capability %d is still in the bounding set", c)
		}
	}
	return nil
}

// openPTY opens a terminal for a command that runs as u (nil: as the
// guest). Its slave side belongs to the user that opens /dev/ptmx, so the
// guest opens it with u's effective ids on this thread alone, as login
// hands a terminal to its user: a command can open its own terminal by
// name (/dev/pts/N), and none of the guest's. gVisor has no setfsuid,
// hence the effective ids.
func openPTY(u *User) (master, slave *os.File, err error) {
	if u == nil {
		return pty.Open()
	}
	type opened struct {
		master, slave *os.File
		err           error
	}
	ch := make(chan opened, 1)
	go func() {
		// A thread that cannot get the guest's ids back is not unlocked:
		// it ends with this goroutine.
		runtime.LockOSThread()
		var o opened
		if _, _, e := syscall.RawSyscall(unix.SYS_SETRESGID, ^uintptr(0), uintptr(u.GID), ^uintptr(0)); e != 0 {
			o.err = fmt.Errorf("opening a terminal as group %d: %w", u.GID, e)
		} else if _, _, e := syscall.RawSyscall(unix.SYS_SETRESUID, ^uintptr(0), uintptr(u.UID), ^uintptr(0)); e != 0 {
			o.err = fmt.Errorf("opening a terminal as user %d: %w", u.UID, e)
		} else {
			o.master, o.slave, o.err = pty.Open()
		}
		if restoreIDs() == nil {
			runtime.UnlockOSThread()
		}
		ch <- o
	}()
	o := <-ch
	return o.master, o.slave, o.err
}

// restoreIDs gives this thread back the guest's effective ids (its real
// ones).
func restoreIDs() error {
	_, _, e1 := syscall.RawSyscall(unix.SYS_SETRESUID, ^uintptr(0), uintptr(os.Getuid()), ^uintptr(0))
	_, _, e2 := syscall.RawSyscall(unix.SYS_SETRESGID, ^uintptr(0), uintptr(os.Getgid()), ^uintptr(0))
	if e1 != 0 || e2 != 0 {
		return fmt.Errorf("restoring the guest's ids: %v %v", e1, e2)
	}
	return nil
}

// credential is how a reaper starts when the commands run as their own
// user: as that user, with no supplementary group.
func credential(u *User) *syscall.Credential {
	if u == nil {
		return nil
	}
	return &syscall.Credential{Uid: uint32(u.UID), Gid: uint32(u.GID), Groups: []uint32{}}
}
