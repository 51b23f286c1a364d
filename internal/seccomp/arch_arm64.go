//go:build linux

package seccomp

import "golang.org/x/sys/unix"

// x32SyscallBit is amd64's; arm64 has no such ABI (32-bit ARM tasks show
// AUDIT_ARCH_ARM and are killed by the architecture check).
const x32SyscallBit = 0

func nativeAudit() (uint32, bool) { return unix.AUDIT_ARCH_AARCH64, true }

// archDeniedSyscalls exist only on arm64.
var archDeniedSyscalls = []uint32{unix.SYS_NFSSERVCTL}

// archMknod: arm64 has only mknodat.
var archMknod = []syscallArg{{unix.SYS_MKNODAT, 2}}
