//go:build linux

package seccomp

import "golang.org/x/sys/unix"

// x32SyscallBit marks a syscall number of the x32 ABI. x32 shares the
// x86_64 audit architecture, so the filter refuses the bit itself.
const x32SyscallBit = 0x40000000

func nativeAudit() (uint32, bool) { return unix.AUDIT_ARCH_X86_64, true }

// archDeniedSyscalls exist only on x86_64.
var archDeniedSyscalls = []uint32{
	unix.SYS_IOPL, unix.SYS_IOPERM, unix.SYS_MODIFY_LDT,
	unix.SYS_CREATE_MODULE, unix.SYS_GET_KERNEL_SYMS, unix.SYS_QUERY_MODULE,
	unix.SYS_USELIB, unix.SYS_USTAT, unix.SYS_SYSFS, unix.SYS__SYSCTL, unix.SYS_NFSSERVCTL,
}

// archMknod are the mknod calls of x86_64, with the index of their mode
// argument: the old mknod exists here besides mknodat.
var archMknod = []syscallArg{{unix.SYS_MKNOD, 1}, {unix.SYS_MKNODAT, 2}}
