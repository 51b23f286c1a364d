//go:build linux && !amd64 && !arm64

package local

// No filter is written for other architectures: New refuses to start.
const x32SyscallBit = 0

func nativeAudit() (uint32, bool) { return 0, false }

var archDeniedSyscalls []uint32
