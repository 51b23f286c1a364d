// Command probe tries, from inside a sandbox, the system calls that the
// local backend's seccomp filter must refuse, and prints one line per try:
// "name=0" when the call succeeded, "name=ERRNO" when it failed. The
// arguments are chosen so that, unconfined, most calls succeed or fail
// with an errno other than EPERM: the control run on the host tells a
// working filter from a call that could not have worked anyway.
//
// "probe x32" and "probe ia32" make one call through the 32-bit entries
// and print "survived" if the process was not killed.
package main

import (
	"errors"
	"fmt"
	"os"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

func main() {
	if len(os.Args) > 1 {
		switch os.Args[1] {
		case "x32":
			// getpid through the x32 ABI: the filter kills the process.
			unix.RawSyscall(0x40000000|unix.SYS_GETPID, 0, 0, 0)
			fmt.Println("survived")
			return
		case "ia32":
			int80(20) // getpid in the i386 table
			fmt.Println("survived")
			return
		}
	}
	errno := func(_, _ uintptr, e syscall.Errno) string {
		if e == 0 {
			return "0"
		}
		return unix.ErrnoName(e)
	}
	report := func(name, res string) { fmt.Printf("%s=%s\n", name, res) }
	var c byte = 'x'
	checks := []struct {
		name string
		try  func() string
	}{
		{"unshare_user", func() string { return errno(unix.RawSyscall(unix.SYS_UNSHARE, unix.CLONE_NEWUSER, 0, 0)) }},
		{"unshare_mount", func() string { return errno(unix.RawSyscall(unix.SYS_UNSHARE, unix.CLONE_NEWNS, 0, 0)) }},
		{"clone_newuser", func() string {
			pid, err := syscall.ForkExec("/bin/true", []string{"true"}, &syscall.ProcAttr{Sys: &syscall.SysProcAttr{Cloneflags: unix.CLONE_NEWUSER}})
			if err == nil {
				var ws syscall.WaitStatus
				syscall.Wait4(pid, &ws, 0, nil)
				return "0"
			}
			var e syscall.Errno
			if errors.As(err, &e) {
				return unix.ErrnoName(e)
			}
			return err.Error()
		}},
		{"clone3", func() string { return errno(unix.RawSyscall(unix.SYS_CLONE3, 0, 0, 0)) }},
		{"setns", func() string { return errno(unix.RawSyscall(unix.SYS_SETNS, ^uintptr(0), 0, 0)) }},
		{"mount", func() string {
			return errno(unix.RawSyscall6(unix.SYS_MOUNT, uintptr(unsafe.Pointer(cstr("none"))), uintptr(unsafe.Pointer(cstr("/tmp"))), uintptr(unsafe.Pointer(cstr("tmpfs"))), 0, 0, 0))
		}},
		{"umount2", func() string {
			return errno(unix.RawSyscall(unix.SYS_UMOUNT2, uintptr(unsafe.Pointer(cstr("/tmp"))), 0, 0))
		}},
		{"pivot_root", func() string {
			return errno(unix.RawSyscall(unix.SYS_PIVOT_ROOT, uintptr(unsafe.Pointer(cstr("/tmp"))), uintptr(unsafe.Pointer(cstr("/tmp"))), 0))
		}},
		{"bpf", func() string { return errno(unix.RawSyscall(unix.SYS_BPF, 0, 0, 0)) }},
		{"perf_event_open", func() string {
			return errno(unix.RawSyscall6(unix.SYS_PERF_EVENT_OPEN, 0, 0, ^uintptr(0), ^uintptr(0), 0, 0))
		}},
		{"userfaultfd", func() string {
			fd, _, e := unix.RawSyscall(unix.SYS_USERFAULTFD, 1 /* UFFD_USER_MODE_ONLY */, 0, 0)
			if e == 0 {
				unix.Close(int(fd))
			}
			return errno(0, 0, e)
		}},
		{"io_uring_setup", func() string { return errno(unix.RawSyscall(unix.SYS_IO_URING_SETUP, 1, 0, 0)) }},
		{"keyctl", func() string {
			return errno(unix.RawSyscall(unix.SYS_KEYCTL, unix.KEYCTL_GET_KEYRING_ID, uintptr(0xfffffffd) /* KEY_SPEC_SESSION_KEYRING */, 0))
		}},
		{"kexec_load", func() string { return errno(unix.RawSyscall6(unix.SYS_KEXEC_LOAD, 0, 0, 0, 0, 0, 0)) }},
		{"init_module", func() string { return errno(unix.RawSyscall(unix.SYS_INIT_MODULE, 0, 0, 0)) }},
		{"finit_module", func() string { return errno(unix.RawSyscall(unix.SYS_FINIT_MODULE, ^uintptr(0), 0, 0)) }},
		{"clock_settime", func() string { return errno(unix.RawSyscall(unix.SYS_CLOCK_SETTIME, 0, 0, 0)) }},
		{"reboot", func() string { return errno(unix.RawSyscall6(unix.SYS_REBOOT, 0, 0, 0, 0, 0, 0)) }},
		// Peek at the parent, which this process does not trace: ESRCH
		// unconfined. (PTRACE_TRACEME would make the control run stop at
		// its first signal, its parent being no debugger.)
		{"ptrace", func() string {
			var word uintptr
			return errno(unix.RawSyscall6(unix.SYS_PTRACE, unix.PTRACE_PEEKDATA, uintptr(os.Getppid()), 0, uintptr(unsafe.Pointer(&word)), 0, 0))
		}},
		{"process_vm_readv", func() string {
			return errno(unix.RawSyscall6(unix.SYS_PROCESS_VM_READV, uintptr(os.Getpid()), 0, 0, 0, 0, 0))
		}},
		{"socket_packet", func() string {
			fd, _, e := unix.RawSyscall(unix.SYS_SOCKET, unix.AF_PACKET, unix.SOCK_RAW, 0)
			if e == 0 {
				unix.Close(int(fd))
			}
			return errno(0, 0, e)
		}},
		{"socket_vsock", func() string {
			fd, _, e := unix.RawSyscall(unix.SYS_SOCKET, unix.AF_VSOCK, unix.SOCK_STREAM, 0)
			if e == 0 {
				unix.Close(int(fd))
			}
			return errno(0, 0, e)
		}},
		{"socket_unix", func() string {
			fd, _, e := unix.RawSyscall(unix.SYS_SOCKET, unix.AF_UNIX, unix.SOCK_STREAM, 0)
			if e == 0 {
				unix.Close(int(fd))
			}
			return errno(0, 0, e)
		}},
		{"ioctl_tiocsti", func() string {
			return errno(unix.RawSyscall(unix.SYS_IOCTL, 0, unix.TIOCSTI, uintptr(unsafe.Pointer(&c))))
		}},
		{"getpid", func() string { return errno(unix.RawSyscall(unix.SYS_GETPID, 0, 0, 0)) }},
	}
	for _, ch := range checks {
		report(ch.name, ch.try())
	}
}

// cstr is a NUL-terminated copy of s.
func cstr(s string) *byte {
	p, err := unix.BytePtrFromString(s)
	if err != nil {
		panic(err)
	}
	return p
}
