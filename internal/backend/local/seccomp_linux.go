package local

import (
	"encoding/binary"
	"fmt"

	"golang.org/x/sys/unix"
)

// The seccomp filter is a deny list in classic BPF, assembled here and
// handed to bubblewrap as bytes (--seccomp FD), which loads it as the last
// step before it executes the guest. Every process in the sandbox inherits
// it; no_new_privs (set by bubblewrap) makes it irrevocable.
//
// Layout of the program:
//
//	arch != native            -> kill the process (the ia32 entry of
//	                             amd64, 32-bit ARM on arm64)
//	nr >= x32 bit (amd64)     -> kill the process (the x32 entry)
//	nr in deniedSyscalls      -> EPERM
//	clone3                    -> ENOSYS (its flags are behind a pointer;
//	                             libc and Go fall back to clone)
//	clone with CLONE_NEW*     -> EPERM
//	socket(AF_PACKET|AF_VSOCK)-> EPERM
//	ioctl(TIOCSTI|TIOCLINUX)  -> EPERM
//	anything else             -> allow
//
// The offsets into struct seccomp_data are fixed by the kernel ABI.

const (
	offNr   = 0
	offArch = 4
	// offArg0Lo and offArg1Lo are the low 32 bits of args[0] and args[1]
	// (little endian: both supported architectures are).
	offArg0Lo = 16
	offArg1Lo = 24
)

// deniedSyscalls fail with EPERM. The list is SECURITY.md A.4-A.6 plus the
// rest of what Docker's default profile refuses to an unprivileged
// container and that exists on every supported architecture; arch-specific
// extras come from archDeniedSyscalls.
var deniedSyscalls = []struct {
	name string
	nr   uint32
}{
	// Kernel attack surface nobody in a sandbox needs (A.6).
	{"bpf", unix.SYS_BPF},
	{"perf_event_open", unix.SYS_PERF_EVENT_OPEN},
	{"userfaultfd", unix.SYS_USERFAULTFD},
	{"io_uring_setup", unix.SYS_IO_URING_SETUP},
	{"io_uring_enter", unix.SYS_IO_URING_ENTER},
	{"io_uring_register", unix.SYS_IO_URING_REGISTER},
	{"keyctl", unix.SYS_KEYCTL},
	{"add_key", unix.SYS_ADD_KEY},
	{"request_key", unix.SYS_REQUEST_KEY},
	{"kexec_load", unix.SYS_KEXEC_LOAD},
	{"kexec_file_load", unix.SYS_KEXEC_FILE_LOAD},
	{"init_module", unix.SYS_INIT_MODULE},
	{"finit_module", unix.SYS_FINIT_MODULE},
	{"delete_module", unix.SYS_DELETE_MODULE},
	{"clock_settime", unix.SYS_CLOCK_SETTIME},
	{"clock_adjtime", unix.SYS_CLOCK_ADJTIME},
	{"settimeofday", unix.SYS_SETTIMEOFDAY},
	{"reboot", unix.SYS_REBOOT},
	{"swapon", unix.SYS_SWAPON},
	{"swapoff", unix.SYS_SWAPOFF},
	{"acct", unix.SYS_ACCT},
	{"quotactl", unix.SYS_QUOTACTL},
	{"quotactl_fd", unix.SYS_QUOTACTL_FD},
	{"syslog", unix.SYS_SYSLOG},
	{"vhangup", unix.SYS_VHANGUP},
	{"lookup_dcookie", unix.SYS_LOOKUP_DCOOKIE},
	{"open_by_handle_at", unix.SYS_OPEN_BY_HANDLE_AT},
	{"name_to_handle_at", unix.SYS_NAME_TO_HANDLE_AT},
	{"fanotify_init", unix.SYS_FANOTIFY_INIT},
	// Mount topology and namespaces (A.4, A.5).
	{"mount", unix.SYS_MOUNT},
	{"umount2", unix.SYS_UMOUNT2},
	{"pivot_root", unix.SYS_PIVOT_ROOT},
	{"chroot", unix.SYS_CHROOT},
	{"open_tree", unix.SYS_OPEN_TREE},
	{"move_mount", unix.SYS_MOVE_MOUNT},
	{"fsopen", unix.SYS_FSOPEN},
	{"fsconfig", unix.SYS_FSCONFIG},
	{"fsmount", unix.SYS_FSMOUNT},
	{"fspick", unix.SYS_FSPICK},
	{"mount_setattr", unix.SYS_MOUNT_SETATTR},
	{"setns", unix.SYS_SETNS},
	{"unshare", unix.SYS_UNSHARE},
	// Other processes' memory and descriptors (A.3).
	{"ptrace", unix.SYS_PTRACE},
	{"process_vm_readv", unix.SYS_PROCESS_VM_READV},
	{"process_vm_writev", unix.SYS_PROCESS_VM_WRITEV},
	{"pidfd_getfd", unix.SYS_PIDFD_GETFD},
	{"kcmp", unix.SYS_KCMP},
}

// nsCloneFlags are the clone flags that create namespaces.
const nsCloneFlags = unix.CLONE_NEWNS | unix.CLONE_NEWUTS | unix.CLONE_NEWIPC | unix.CLONE_NEWUSER |
	unix.CLONE_NEWPID | unix.CLONE_NEWNET | unix.CLONE_NEWCGROUP | unix.CLONE_NEWTIME

// deniedSocketFamilies fail socket(2) with EPERM (A.6).
var deniedSocketFamilies = []uint32{unix.AF_PACKET, unix.AF_VSOCK}

// deniedIoctls fail ioctl(2) with EPERM: TIOCSTI injects input into a
// terminal (A.9), TIOCLINUX can do the same on a virtual console.
var deniedIoctls = []uint32{unix.TIOCSTI, unix.TIOCLINUX}

// insn is one classic BPF instruction (struct sock_filter).
type insn struct {
	code   uint16
	jt, jf uint8
	k      uint32
	// Symbolic jump targets, resolved by assemble.
	jtLabel, jfLabel string
}

// program collects instructions and labels.
type program struct {
	insns  []insn
	labels map[string]int
}

func (p *program) add(i insn) { p.insns = append(p.insns, i) }

func (p *program) label(name string) { p.labels[name] = len(p.insns) }

func (p *program) load(off uint32) {
	p.add(insn{code: unix.BPF_LD | unix.BPF_W | unix.BPF_ABS, k: off})
}

// jeq jumps to label when A == k and falls through otherwise.
func (p *program) jeq(k uint32, label string) {
	p.add(insn{code: unix.BPF_JMP | unix.BPF_JEQ | unix.BPF_K, k: k, jtLabel: label})
}

// jne jumps to label when A != k and falls through otherwise.
func (p *program) jne(k uint32, label string) {
	p.add(insn{code: unix.BPF_JMP | unix.BPF_JEQ | unix.BPF_K, k: k, jfLabel: label})
}

// jge jumps to label when A >= k.
func (p *program) jge(k uint32, label string) {
	p.add(insn{code: unix.BPF_JMP | unix.BPF_JGE | unix.BPF_K, k: k, jtLabel: label})
}

// jset jumps to label when A & k != 0.
func (p *program) jset(k uint32, label string) {
	p.add(insn{code: unix.BPF_JMP | unix.BPF_JSET | unix.BPF_K, k: k, jtLabel: label})
}

func (p *program) ret(k uint32) {
	p.add(insn{code: unix.BPF_RET | unix.BPF_K, k: k})
}

// assemble resolves labels and encodes the program as the kernel's array of
// struct sock_filter, which is what bubblewrap reads from its --seccomp fd.
func (p *program) assemble() ([]byte, error) {
	if len(p.insns) > unix.BPF_MAXINSNS {
		return nil, fmt.Errorf("seccomp program has %d instructions, the kernel takes %d", len(p.insns), unix.BPF_MAXINSNS)
	}
	out := make([]byte, 0, 8*len(p.insns))
	for pc, in := range p.insns {
		for _, l := range []struct {
			name string
			dst  *uint8
		}{{in.jtLabel, &in.jt}, {in.jfLabel, &in.jf}} {
			if l.name == "" {
				continue
			}
			target, ok := p.labels[l.name]
			if !ok {
				return nil, fmt.Errorf("seccomp program: undefined label %q", l.name)
			}
			off := target - pc - 1
			if off < 0 || off > 255 {
				return nil, fmt.Errorf("seccomp program: jump from %d to %q (%d) out of range", pc, l.name, target)
			}
			*l.dst = uint8(off)
		}
		out = binary.LittleEndian.AppendUint16(out, in.code)
		out = append(out, in.jt, in.jf)
		out = binary.LittleEndian.AppendUint32(out, in.k)
	}
	return out, nil
}

// seccompFilter returns the compiled filter for this architecture.
func seccompFilter() ([]byte, error) {
	arch, ok := nativeAudit()
	if !ok {
		return nil, fmt.Errorf("no seccomp filter for this architecture")
	}
	const (
		lKill   = "kill"
		lEPERM  = "eperm"
		lENOSYS = "enosys"
		lAllow  = "allow"
		lClone  = "clone"
		lSocket = "socket"
		lIoctl  = "ioctl"
	)
	p := &program{labels: map[string]int{}}
	p.load(offArch)
	p.jne(arch, lKill)
	p.load(offNr)
	if x32SyscallBit != 0 {
		p.jge(x32SyscallBit, lKill)
	}
	for _, s := range deniedSyscalls {
		p.jeq(s.nr, lEPERM)
	}
	for _, nr := range archDeniedSyscalls {
		p.jeq(nr, lEPERM)
	}
	p.jeq(unix.SYS_CLONE3, lENOSYS)
	p.jeq(unix.SYS_CLONE, lClone)
	p.jeq(unix.SYS_SOCKET, lSocket)
	p.jeq(unix.SYS_IOCTL, lIoctl)
	p.ret(unix.SECCOMP_RET_ALLOW)

	p.label(lClone)
	p.load(offArg0Lo)
	p.jset(nsCloneFlags, lEPERM)
	p.ret(unix.SECCOMP_RET_ALLOW)

	p.label(lSocket)
	p.load(offArg0Lo)
	for _, f := range deniedSocketFamilies {
		p.jeq(f, lEPERM)
	}
	p.ret(unix.SECCOMP_RET_ALLOW)

	p.label(lIoctl)
	p.load(offArg1Lo)
	for _, c := range deniedIoctls {
		p.jeq(c, lEPERM)
	}
	p.label(lAllow)
	p.ret(unix.SECCOMP_RET_ALLOW)

	p.label(lEPERM)
	p.ret(unix.SECCOMP_RET_ERRNO | uint32(unix.EPERM))
	p.label(lENOSYS)
	p.ret(unix.SECCOMP_RET_ERRNO | uint32(unix.ENOSYS))
	p.label(lKill)
	p.ret(unix.SECCOMP_RET_KILL_PROCESS)
	return p.assemble()
}
