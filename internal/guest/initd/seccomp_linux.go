package initd

import (
	"fmt"
	"runtime"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// nativeArch is the seccomp architecture of this build, 0 if unknown.
var nativeArch = map[string]uint32{
	"amd64": unix.AUDIT_ARCH_X86_64,
	"arm64": unix.AUDIT_ARCH_AARCH64,
}[runtime.GOARCH]

// protectedSyscalls are the calls that act on another process by pid, with
// the index of their pid argument: signals, tracing, memory access, limits.
var protectedSyscalls = []struct {
	nr  uint32
	arg uint32
}{
	{unix.SYS_KILL, 0},
	{unix.SYS_TKILL, 0},
	{unix.SYS_TGKILL, 0},
	{unix.SYS_RT_SIGQUEUEINFO, 0},
	{unix.SYS_RT_TGSIGQUEUEINFO, 0},
	{unix.SYS_PIDFD_OPEN, 0},
	{unix.SYS_PTRACE, 1},
	{unix.SYS_PROCESS_VM_READV, 0},
	{unix.SYS_PROCESS_VM_WRITEV, 0},
	{unix.SYS_PRLIMIT64, 0},
}

// protectGuest installs, on the calling thread, a seccomp filter that
// every command started from this thread inherits: the calls above fail
// with EPERM when aimed at PID 1 or at the guest. Linux already ignores
// SIGKILL and SIGSTOP sent to a namespace's PID 1 from inside, but gVisor
// 20221219 does not, and under bubblewrap the guest is not PID 1 at all.
// The filter also sets no_new_privs, which it requires.
//
// Only the native system call ABI is filtered: gVisor has no other, and on
// Linux the kernel protects PID 1 and no_new_privs plus non-dumpability
// protect the guest from the commands' other ABIs.
func protectGuest(guestPid int) error {
	if nativeArch == 0 {
		return fmt.Errorf("no seccomp filter for %s", runtime.GOARCH)
	}
	prog := guardFilter(uint32(guestPid))
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("PR_SET_NO_NEW_PRIVS: %w", err)
	}
	fprog := unix.SockFprog{Len: uint16(len(prog)), Filter: &prog[0]}
	if err := unix.Prctl(unix.PR_SET_SECCOMP, unix.SECCOMP_MODE_FILTER, uintptr(unsafe.Pointer(&fprog)), 0, 0); err != nil {
		return fmt.Errorf("installing the seccomp filter: %w", err)
	}
	return nil
}

// guardFilter assembles the filter. Per protected call:
//
//	jeq nr, 0, 2      not this call: try the next one
//	ld  args[arg]     the low 32 bits: the kernel reads pid_t as an int
//	jeq 1, deny, +1
//	jeq guest, deny, allow
func guardFilter(guest uint32) []unix.SockFilter {
	stmt := func(code uint16, k uint32) unix.SockFilter { return unix.SockFilter{Code: code, K: k} }
	jump := func(k uint32, jt, jf uint8) unix.SockFilter {
		return unix.SockFilter{Code: unix.BPF_JMP | unix.BPF_JEQ | unix.BPF_K, K: k, Jt: jt, Jf: jf}
	}
	const (
		ld        = unix.BPF_LD | unix.BPF_W | unix.BPF_ABS
		offNr     = 0
		offArch   = 4
		offArgs   = 16
		perSyscal = 4
	)
	n := len(protectedSyscalls)
	allow := 3 + perSyscal*n // index of "ret allow"; "ret deny" follows
	deny := allow + 1
	prog := []unix.SockFilter{
		stmt(ld, offArch),
		jump(nativeArch, 0, uint8(allow-2)),
		stmt(ld, offNr),
	}
	for _, s := range protectedSyscalls {
		i := len(prog)
		prog = append(prog,
			jump(s.nr, 0, 3),
			stmt(ld, offArgs+8*s.arg),
			jump(1, uint8(deny-(i+3)), 0),
			jump(guest, uint8(deny-(i+4)), uint8(allow-(i+4))),
		)
	}
	return append(prog,
		stmt(unix.BPF_RET|unix.BPF_K, unix.SECCOMP_RET_ALLOW),
		stmt(unix.BPF_RET|unix.BPF_K, unix.SECCOMP_RET_ERRNO|uint32(syscall.EPERM)),
	)
}
