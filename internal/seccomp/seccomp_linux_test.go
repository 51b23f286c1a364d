// The filters exist for amd64 and arm64 only (arch_*.go); on another
// architecture Build refuses, which seccomp_other_linux_test.go checks.

//go:build amd64 || arm64

package seccomp

import (
	"encoding/binary"
	"testing"

	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"
)

// run evaluates the filter on one struct seccomp_data in a classic BPF
// interpreter and returns the action.
func run(t *testing.T, f Filter, arch, nr uint32, args ...uint64) uint32 {
	t.Helper()
	raw := make([]bpf.RawInstruction, len(f))
	for i, in := range f {
		raw[i] = bpf.RawInstruction{Op: in.Code, Jt: in.Jt, Jf: in.Jf, K: in.K}
	}
	prog, ok := bpf.Disassemble(raw)
	if !ok {
		t.Fatalf("the filter holds an instruction the interpreter does not know")
	}
	vm, err := bpf.NewVM(prog)
	if err != nil {
		t.Fatalf("the interpreter refuses the filter: %v", err)
	}
	// struct seccomp_data: nr, arch, instruction_pointer, args[6]. The
	// kernel presents it in host byte order; the interpreter loads big
	// endian, so the words go in swapped.
	data := make([]byte, 64)
	binary.BigEndian.PutUint32(data[offNr:], nr)
	binary.BigEndian.PutUint32(data[offArch:], arch)
	for i, a := range args {
		binary.BigEndian.PutUint32(data[offArgs+8*i:], uint32(a))
		binary.BigEndian.PutUint32(data[offArgs+8*i+4:], uint32(a>>32))
	}
	out, err := vm.Run(data)
	if err != nil {
		t.Fatalf("running the filter: %v", err)
	}
	return uint32(out)
}

func TestFilterDecisions(t *testing.T) {
	arch, _ := nativeAudit()
	const guest = 4242
	f, err := Build(Options{Protect: []int{guest}})
	if err != nil {
		t.Fatal(err)
	}
	const (
		allow  = unix.SECCOMP_RET_ALLOW
		eperm  = unix.SECCOMP_RET_ERRNO | uint32(unix.EPERM)
		enosys = unix.SECCOMP_RET_ERRNO | uint32(unix.ENOSYS)
		kill   = unix.SECCOMP_RET_KILL_PROCESS
	)
	sigkill := uint64(unix.SIGKILL)
	cases := []struct {
		name string
		arch uint32
		nr   uint32
		args []uint64
		want uint32
	}{
		{"getpid", arch, unix.SYS_GETPID, nil, allow},
		{"another architecture", unix.AUDIT_ARCH_I386, unix.SYS_GETPID, nil, kill},
		{"mount", arch, unix.SYS_MOUNT, nil, eperm},
		{"unshare", arch, unix.SYS_UNSHARE, []uint64{unix.CLONE_NEWNS}, eperm},
		{"io_uring_setup", arch, unix.SYS_IO_URING_SETUP, nil, eperm},
		{"ptrace", arch, unix.SYS_PTRACE, []uint64{unix.PTRACE_ATTACH, 5}, eperm},
		{"clone3", arch, unix.SYS_CLONE3, nil, enosys},
		{"clone a thread", arch, unix.SYS_CLONE, []uint64{unix.CLONE_VM | unix.CLONE_THREAD}, allow},
		{"clone a user namespace", arch, unix.SYS_CLONE, []uint64{unix.CLONE_NEWUSER}, eperm},
		{"clone a pid namespace", arch, unix.SYS_CLONE, []uint64{unix.CLONE_NEWPID | uint64(unix.SIGCHLD)}, eperm},
		{"an inet socket", arch, unix.SYS_SOCKET, []uint64{unix.AF_INET}, allow},
		{"a packet socket", arch, unix.SYS_SOCKET, []uint64{unix.AF_PACKET}, eperm},
		{"a vsock socket", arch, unix.SYS_SOCKET, []uint64{unix.AF_VSOCK}, eperm},
		{"TIOCSTI", arch, unix.SYS_IOCTL, []uint64{0, unix.TIOCSTI}, eperm},
		{"TIOCSWINSZ", arch, unix.SYS_IOCTL, []uint64{0, unix.TIOCSWINSZ}, allow},
		{"mknodat a char device", arch, unix.SYS_MKNODAT, []uint64{0, 0, unix.S_IFCHR | 0o600, 0x103}, eperm},
		{"mknodat a block device", arch, unix.SYS_MKNODAT, []uint64{0, 0, unix.S_IFBLK | 0o600, 0x800}, eperm},
		{"mknodat a FIFO", arch, unix.SYS_MKNODAT, []uint64{0, 0, unix.S_IFIFO | 0o600, 0}, allow},
		{"mknodat a socket", arch, unix.SYS_MKNODAT, []uint64{0, 0, unix.S_IFSOCK | 0o600, 0}, allow},
		{"kill a child", arch, unix.SYS_KILL, []uint64{77, sigkill}, allow},
		{"kill own process group", arch, unix.SYS_KILL, []uint64{0, sigkill}, allow},
		{"kill PID 1", arch, unix.SYS_KILL, []uint64{1, sigkill}, eperm},
		{"kill everything", arch, unix.SYS_KILL, []uint64{uint64(0xffffffff), sigkill}, eperm},
		{"kill everything, sign-extended", arch, unix.SYS_KILL, []uint64{^uint64(0), sigkill}, eperm},
		{"kill the guest", arch, unix.SYS_KILL, []uint64{guest, sigkill}, eperm},
		{"tgkill the guest", arch, unix.SYS_TGKILL, []uint64{guest, guest, sigkill}, eperm},
		{"pidfd_open the guest", arch, unix.SYS_PIDFD_OPEN, []uint64{guest, 0}, eperm},
		{"prlimit the guest", arch, unix.SYS_PRLIMIT64, []uint64{guest}, eperm},
		{"prlimit self", arch, unix.SYS_PRLIMIT64, []uint64{0}, allow},
	}
	if x32SyscallBit != 0 {
		cases = append(cases, struct {
			name string
			arch uint32
			nr   uint32
			args []uint64
			want uint32
		}{"the x32 entry", arch, x32SyscallBit | unix.SYS_GETPID, nil, kill})
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := run(t, f, c.arch, c.nr, c.args...); got != c.want {
				t.Errorf("action %#x, want %#x", got, c.want)
			}
		})
	}
}

// TestFilterShape checks what the kernel's verifier checks when the filter
// loads: every jump inside the program, a return at the end.
func TestFilterShape(t *testing.T) {
	f, err := Build(Options{Protect: []int{2, 3}})
	if err != nil {
		t.Fatal(err)
	}
	if len(f) == 0 || len(f) > unix.BPF_MAXINSNS {
		t.Fatalf("%d instructions", len(f))
	}
	for pc, in := range f {
		if in.Code&0x07 == unix.BPF_JMP && pc+1+max(int(in.Jt), int(in.Jf)) >= len(f) {
			t.Errorf("instruction %d jumps past the end", pc)
		}
	}
	if last := f[len(f)-1]; last.Code&0x07 != unix.BPF_RET {
		t.Error("the program does not end with a return")
	}
	if got := len(f.Bytes()); got != 8*len(f) {
		t.Errorf("Bytes is %d bytes for %d instructions", got, len(f))
	}
}

// TestFilterThreadSignals checks the filter of a PID 1 that signals its own
// threads: tgkill passes, every other call aimed at PID 1 does not.
func TestFilterThreadSignals(t *testing.T) {
	arch, _ := nativeAudit()
	f, err := Build(Options{ThreadSignals: true})
	if err != nil {
		t.Fatal(err)
	}
	eperm := unix.SECCOMP_RET_ERRNO | uint32(unix.EPERM)
	for _, c := range []struct {
		nr   uint32
		args []uint64
		want uint32
	}{
		{unix.SYS_TGKILL, []uint64{1, 7, uint64(unix.SIGURG)}, unix.SECCOMP_RET_ALLOW},
		{unix.SYS_KILL, []uint64{1, uint64(unix.SIGKILL)}, eperm},
		{unix.SYS_TKILL, []uint64{1, uint64(unix.SIGKILL)}, eperm},
		{unix.SYS_PIDFD_OPEN, []uint64{1, 0}, eperm},
	} {
		if got := run(t, f, arch, c.nr, c.args...); got != c.want {
			t.Errorf("syscall %d%v: action %#x, want %#x", c.nr, c.args, got, c.want)
		}
	}
}

func TestFilterBadInput(t *testing.T) {
	if _, err := Build(Options{Protect: []int{0}}); err == nil {
		t.Error("built a filter protecting pid 0")
	}
	p := &program{labels: map[string]int{}}
	p.jeq(1, "nowhere")
	if _, err := p.assemble(); err == nil {
		t.Error("assembled a jump to an undefined label")
	}
}

// TestFilterEveryNumber checks the dispatch on the system call number over
// the whole range gVisor evaluates (0 to 2000): with the arguments that
// trip one rule, exactly that rule's calls and the denied ones fail.
func TestFilterEveryNumber(t *testing.T) {
	arch, _ := nativeAudit()
	const guest = 4242
	f, err := Build(Options{Protect: []int{guest}})
	if err != nil {
		t.Fatal(err)
	}
	denied := map[uint32]bool{}
	for _, s := range deniedSyscalls {
		denied[s.nr] = true
	}
	for _, nr := range archDeniedSyscalls {
		denied[nr] = true
	}
	set := func(nrs ...uint32) map[uint32]bool {
		m := map[uint32]bool{}
		for _, nr := range nrs {
			m[nr] = true
		}
		return m
	}
	var mknods []uint32
	for _, m := range archMknod {
		mknods = append(mknods, m.nr)
	}
	for _, rule := range []struct {
		name  string
		args  []uint64
		trips map[uint32]bool
	}{
		{"no argument trips a rule", nil, nil},
		{"a namespace flag", []uint64{unix.CLONE_NEWNS}, set(unix.SYS_CLONE)},
		{"a packet socket", []uint64{unix.AF_PACKET}, set(unix.SYS_SOCKET)},
		{"TIOCSTI", []uint64{0, unix.TIOCSTI}, set(unix.SYS_IOCTL)},
		{"a char device", []uint64{0, unix.S_IFCHR, unix.S_IFCHR}, set(mknods...)},
		{"PID 1", []uint64{1}, set(pidSyscalls...)},
	} {
		for nr := uint32(0); nr <= 2000; nr++ {
			want := uint32(unix.SECCOMP_RET_ALLOW)
			switch {
			case denied[nr] || rule.trips[nr]:
				want = unix.SECCOMP_RET_ERRNO | uint32(unix.EPERM)
			case nr == unix.SYS_CLONE3:
				want = unix.SECCOMP_RET_ERRNO | uint32(unix.ENOSYS)
			}
			if got := run(t, f, arch, nr, rule.args...); got != want {
				t.Errorf("%s: syscall %d: action %#x, want %#x", rule.name, nr, got, want)
			}
		}
	}
}

// TestFilterPathLength bounds the longest run through the filter: the
// dispatch is a search, not a chain of one comparison per rule (see
// program.dispatch for why that matters under gVisor).
func TestFilterPathLength(t *testing.T) {
	f, err := Build(Options{Protect: []int{2, 3}})
	if err != nil {
		t.Fatal(err)
	}
	// Jumps only go forward, so the longest path from each instruction
	// follows from those after it.
	longest := make([]int, len(f)+1)
	for pc := len(f) - 1; pc >= 0; pc-- {
		in := f[pc]
		switch {
		case in.Code&0x07 == unix.BPF_RET:
			longest[pc] = 1
		case in.Code&0x07 == unix.BPF_JMP && in.Code&0xf0 == unix.BPF_JA:
			longest[pc] = 1 + longest[pc+1+int(in.K)]
		case in.Code&0x07 == unix.BPF_JMP:
			longest[pc] = 1 + max(longest[pc+1+int(in.Jt)], longest[pc+1+int(in.Jf)])
		default:
			longest[pc] = 1 + longest[pc+1]
		}
	}
	if rules := len(deniedSyscalls) + len(archDeniedSyscalls) + len(pidSyscalls); longest[0] > 24 {
		t.Errorf("the longest run through the filter is %d instructions (%d rules)", longest[0], rules)
	}
	t.Logf("%d instructions, longest run %d", len(f), longest[0])
}
