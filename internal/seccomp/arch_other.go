//go:build linux && !amd64 && !arm64

package seccomp

// No filter is written for other architectures: Build refuses.
const x32SyscallBit = 0

func nativeAudit() (uint32, bool) { return 0, false }

var archDeniedSyscalls []uint32

var archMknod []syscallArg
