// Package seccomp is agentbox's one seccomp policy: the system calls that no
// command in a sandbox may make, whatever the backend. The local backend
// hands it to bubblewrap, which loads it before the guest starts; every
// reaper of the guest loads it again, with the guest's pid protected, on
// the thread that forks commands, so that commands under runc and under
// gVisor (which applies the engine's own profile only with --oci-seccomp)
// get exactly the same refusals as in the local jail.
//
// The filter is a deny list in classic BPF, assembled here. Layout:
//
//	arch != native             -> kill the process (the ia32 entry of
//	                              amd64, 32-bit ARM on arm64)
//	nr >= x32 bit (amd64)      -> kill the process (the x32 entry)
//	nr in deniedSyscalls       -> EPERM
//	clone3                     -> ENOSYS (its flags are behind a pointer;
//	                              libc and Go fall back to clone)
//	clone with CLONE_NEW*      -> EPERM
//	socket(AF_PACKET|AF_VSOCK) -> EPERM
//	ioctl(TIOCSTI|TIOCLINUX)   -> EPERM
//	mknod of a char or block
//	device                     -> EPERM (FIFOs and sockets stay allowed)
//	kill-like call aimed at 1,
//	-1 or a protected pid      -> EPERM
//	anything else              -> allow
//
// The rules on the call number are one binary search, not a chain of
// comparisons (see program.dispatch).
//
// The offsets into struct seccomp_data are fixed by the kernel ABI.
package seccomp

import (
	"cmp"
	"encoding/binary"
	"fmt"
	"slices"
	"unsafe"

	"golang.org/x/sys/unix"
)

const (
	offNr   = 0
	offArch = 4
	// offArgs is args[0]; each argument is 8 bytes, and a filter reads
	// the low 32 bits (little endian: both supported architectures are).
	offArgs = 16
)

// syscallArg is a system call and the index of the argument a rule reads.
type syscallArg struct {
	nr  uint32
	arg uint32
}

// deniedSyscalls fail with EPERM. The list is SECURITY.md A.3-A.6 plus the
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
	// Other processes' memory and descriptors (A.3). ptrace goes whole:
	// a per-pid rule cannot cover a helper between its exec and the
	// moment it makes itself undumpable.
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

// deniedNodeTypes are the file types mknod may not create (A.8). Linux
// refuses them without CAP_MKNOD already; gVisor's tmpfs does not.
var deniedNodeTypes = []uint32{unix.S_IFCHR, unix.S_IFBLK}

// pidSyscalls act on another process by the pid in their first argument:
// signals, pidfds and resource limits. Aimed at a protected pid, PID 1 or
// -1 (every process the caller may signal), they fail with EPERM. Linux
// already ignores SIGKILL and SIGSTOP sent to a namespace's PID 1 from
// inside, but gVisor 20221219 does not, and under bubblewrap the guest is
// not PID 1 at all.
var pidSyscalls = []uint32{
	unix.SYS_KILL,
	unix.SYS_TKILL,
	unix.SYS_TGKILL,
	unix.SYS_RT_SIGQUEUEINFO,
	unix.SYS_RT_TGSIGQUEUEINFO,
	unix.SYS_PIDFD_OPEN,
	unix.SYS_PRLIMIT64,
}

// Options shape a filter.
type Options struct {
	// Protect are pids, besides 1 and -1, that the calls in pidSyscalls
	// may not target: the guest's own.
	Protect []int
	// ThreadSignals leaves tgkill unchecked, for a filter whose first
	// process is PID 1 and signals its own threads: the Go runtime does,
	// with tgkill(getpid(), tid, ...), to preempt them and to change the
	// credentials of every thread (syscall.AllThreadsSyscall), which the
	// guest does to become its own user. The local backend's filter,
	// loaded by bubblewrap above the guest, sets it; every reaper's,
	// which commands run under, does not.
	ThreadSignals bool
}

// Filter is an assembled program.
type Filter []unix.SockFilter

// Build assembles the filter for this architecture.
func Build(opts Options) (Filter, error) {
	arch, ok := nativeAudit()
	if !ok {
		return nil, fmt.Errorf("no seccomp filter for this architecture")
	}
	const (
		lKill   = "kill"
		lEPERM  = "eperm"
		lENOSYS = "enosys"
		lClone  = "clone"
		lSocket = "socket"
		lIoctl  = "ioctl"
		lPid    = "pid"
	)
	p := &program{labels: map[string]int{}}
	p.load(offArch)
	p.jne(arch, lKill)
	p.load(offNr)
	if x32SyscallBit != 0 {
		p.jge(x32SyscallBit, lKill)
	}
	// Every call the filter looks at, and where it goes. The rest are
	// allowed.
	var cases []dispatchCase
	for _, s := range deniedSyscalls {
		cases = append(cases, dispatchCase{s.nr, lEPERM})
	}
	for _, nr := range archDeniedSyscalls {
		cases = append(cases, dispatchCase{nr, lEPERM})
	}
	cases = append(cases,
		dispatchCase{unix.SYS_CLONE3, lENOSYS},
		dispatchCase{unix.SYS_CLONE, lClone},
		dispatchCase{unix.SYS_SOCKET, lSocket},
		dispatchCase{unix.SYS_IOCTL, lIoctl})
	for _, m := range archMknod {
		cases = append(cases, dispatchCase{m.nr, fmt.Sprintf("mknod%d", m.arg)})
	}
	for _, nr := range pidSyscalls {
		if nr == unix.SYS_TGKILL && opts.ThreadSignals {
			continue
		}
		cases = append(cases, dispatchCase{nr, lPid})
	}
	if err := p.dispatch(cases); err != nil {
		return nil, err
	}

	p.label(lClone)
	p.load(offArgs)
	p.jset(nsCloneFlags, lEPERM)
	p.ret(unix.SECCOMP_RET_ALLOW)

	p.label(lSocket)
	p.load(offArgs)
	for _, f := range deniedSocketFamilies {
		p.jeq(f, lEPERM)
	}
	p.ret(unix.SECCOMP_RET_ALLOW)

	p.label(lIoctl)
	p.load(offArgs + 8)
	for _, c := range deniedIoctls {
		p.jeq(c, lEPERM)
	}
	p.ret(unix.SECCOMP_RET_ALLOW)

	done := map[uint32]bool{}
	for _, m := range archMknod {
		if done[m.arg] {
			continue
		}
		done[m.arg] = true
		p.label(fmt.Sprintf("mknod%d", m.arg))
		p.load(offArgs + 8*m.arg)
		p.and(unix.S_IFMT)
		for _, t := range deniedNodeTypes {
			p.jeq(t, lEPERM)
		}
		p.ret(unix.SECCOMP_RET_ALLOW)
	}

	p.label(lPid)
	p.load(offArgs)
	p.jeq(1, lEPERM)
	p.jeq(^uint32(0), lEPERM)
	for _, pid := range opts.Protect {
		if pid <= 0 {
			return nil, fmt.Errorf("seccomp filter: protected pid %d is not a process", pid)
		}
		p.jeq(uint32(pid), lEPERM)
	}
	p.ret(unix.SECCOMP_RET_ALLOW)

	p.label(lEPERM)
	p.ret(unix.SECCOMP_RET_ERRNO | uint32(unix.EPERM))
	p.label(lENOSYS)
	p.ret(unix.SECCOMP_RET_ERRNO | uint32(unix.ENOSYS))
	p.label(lKill)
	p.ret(unix.SECCOMP_RET_KILL_PROCESS)
	return p.assemble()
}

// Bytes encodes the filter as the kernel's array of struct sock_filter,
// which is what bubblewrap reads from its --seccomp descriptor.
func (f Filter) Bytes() []byte {
	out := make([]byte, 0, 8*len(f))
	for _, in := range f {
		out = binary.LittleEndian.AppendUint16(out, in.Code)
		out = append(out, in.Jt, in.Jf)
		out = binary.LittleEndian.AppendUint32(out, in.K)
	}
	return out
}

// InstallThread loads the filter on the calling thread only (no TSYNC):
// the processes that thread forks inherit it. It sets no_new_privs, which
// an unprivileged filter requires. The caller keeps the goroutine locked
// to its thread.
func (f Filter) InstallThread() error {
	if len(f) == 0 {
		return fmt.Errorf("empty seccomp filter")
	}
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("PR_SET_NO_NEW_PRIVS: %w", err)
	}
	prog := unix.SockFprog{Len: uint16(len(f)), Filter: &f[0]}
	if err := unix.Prctl(unix.PR_SET_SECCOMP, unix.SECCOMP_MODE_FILTER, uintptr(unsafe.Pointer(&prog)), 0, 0); err != nil {
		return fmt.Errorf("installing the seccomp filter: %w", err)
	}
	return nil
}

// dispatchCase sends one system call number to a label.
type dispatchCase struct {
	nr    uint32
	label string
}

// dispatchLeaf is the most cases a leaf of the dispatch tree compares in a
// row.
const dispatchLeaf = 4

// dispatch emits a binary search on the system call number (in A) over
// cases, each found one jumping to its label and any other number
// allowed. A search, not a chain of comparisons: a chain costs every
// allowed call one comparison per case, and gVisor runs the filter once
// for each of 2,001 call numbers at every fork of a filtered process (to
// fill its per-task cache of constant actions): 1.3 ms of its CPU per
// fork with the chain of 70 comparisons, 0.64 ms with the search.
func (p *program) dispatch(cases []dispatchCase) error {
	cases = slices.Clone(cases)
	slices.SortFunc(cases, func(a, b dispatchCase) int { return cmp.Compare(a.nr, b.nr) })
	for i := 1; i < len(cases); i++ {
		if cases[i].nr == cases[i-1].nr {
			return fmt.Errorf("seccomp program: system call %d has two rules", cases[i].nr)
		}
	}
	const allow = "allow"
	if len(cases) > 0 {
		// Numbers above the last case, most of the range gVisor walks,
		// are allowed at once.
		p.jge(cases[len(cases)-1].nr+1, allow)
		p.searchNode(cases, allow)
	}
	p.label(allow)
	p.ret(unix.SECCOMP_RET_ALLOW)
	return nil
}

// searchNode emits the subtree for cases, sorted and not empty, which
// holds every number that reaches it; a number it does not hold goes to
// allow.
func (p *program) searchNode(cases []dispatchCase, allow string) {
	if len(cases) <= dispatchLeaf {
		last := len(cases) - 1
		for _, c := range cases[:last] {
			p.jeq(c.nr, c.label)
		}
		p.add(unix.BPF_JMP|unix.BPF_JEQ|unix.BPF_K, cases[last].nr, cases[last].label, allow)
		return
	}
	mid := len(cases) / 2
	upper := fmt.Sprintf("nr>=%d", cases[mid].nr)
	p.jge(cases[mid].nr, upper)
	p.searchNode(cases[:mid], allow)
	p.label(upper)
	p.searchNode(cases[mid:], allow)
}

// insn is one classic BPF instruction with symbolic jump targets,
// resolved by assemble.
type insn struct {
	unix.SockFilter
	jtLabel, jfLabel string
}

// program collects instructions and labels.
type program struct {
	insns  []insn
	labels map[string]int
}

func (p *program) add(code uint16, k uint32, jt, jf string) {
	p.insns = append(p.insns, insn{SockFilter: unix.SockFilter{Code: code, K: k}, jtLabel: jt, jfLabel: jf})
}

func (p *program) label(name string) { p.labels[name] = len(p.insns) }

func (p *program) load(off uint32) { p.add(unix.BPF_LD|unix.BPF_W|unix.BPF_ABS, off, "", "") }

func (p *program) and(k uint32) { p.add(unix.BPF_ALU|unix.BPF_AND|unix.BPF_K, k, "", "") }

// jeq jumps to label when A == k and falls through otherwise.
func (p *program) jeq(k uint32, label string) {
	p.add(unix.BPF_JMP|unix.BPF_JEQ|unix.BPF_K, k, label, "")
}

// jne jumps to label when A != k and falls through otherwise.
func (p *program) jne(k uint32, label string) {
	p.add(unix.BPF_JMP|unix.BPF_JEQ|unix.BPF_K, k, "", label)
}

// jge jumps to label when A >= k.
func (p *program) jge(k uint32, label string) {
	p.add(unix.BPF_JMP|unix.BPF_JGE|unix.BPF_K, k, label, "")
}

// jset jumps to label when A & k != 0.
func (p *program) jset(k uint32, label string) {
	p.add(unix.BPF_JMP|unix.BPF_JSET|unix.BPF_K, k, label, "")
}

func (p *program) ret(k uint32) { p.add(unix.BPF_RET|unix.BPF_K, k, "", "") }

// assemble resolves labels into relative jumps.
func (p *program) assemble() (Filter, error) {
	if len(p.insns) > unix.BPF_MAXINSNS {
		return nil, fmt.Errorf("seccomp program has %d instructions, the kernel takes %d", len(p.insns), unix.BPF_MAXINSNS)
	}
	out := make(Filter, 0, len(p.insns))
	for pc, in := range p.insns {
		for _, l := range []struct {
			name string
			dst  *uint8
		}{{in.jtLabel, &in.Jt}, {in.jfLabel, &in.Jf}} {
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
		out = append(out, in.SockFilter)
	}
	return out, nil
}
