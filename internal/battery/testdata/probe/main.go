// Command probe is the hostile battery's one program: the same static
// binary runs unconfined on the host (the control) and inside every
// backend's sandbox, and prints what it could do, one "key=value" or
// "word args" line per observation. It never judges: the tests do, from
// the host.
//
// Arguments are chosen so that the control cannot harm the host: calls
// that are not namespaced (reboot, kexec, clock_settime, modules) get
// invalid arguments, so that root on the host gets EINVAL, EFAULT, EBADF or
// ENOEXEC past the privilege check, while a confined process must be
// refused before it (EPERM, ENOSYS, EACCES). Mount-table calls run, in the
// control, inside a throwaway mount namespace (unshare -m).
package main

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: probe COMMAND [ARGS]")
		os.Exit(2)
	}
	args := os.Args[2:]
	switch os.Args[1] {
	case "exit0":
		return
	case "ids":
		ids()
	case "syscalls":
		syscalls(args)
	case "ia32":
		ia32(args[0])
	case "ia32all":
		ia32all()
	case "fds":
		fds()
	case "procs":
		procs()
	case "hold":
		mode := ""
		if len(args) > 1 {
			mode = args[1]
		}
		hold(args[0], mode)
	case "double":
		spawn(args[0], "setsid")
	case "tree":
		tree(args[0])
	case "tiocsti":
		tiocsti(args[0])
	case "devs":
		devs(args)
	case "writes":
		writes()
	case "writable":
		writable()
	case "scan":
		scan(args)
	case "sockets":
		sockets(args)
	case "guestchan":
		guestchan(args)
	case "net":
		netProbes(args)
	case "listen":
		listen(args)
	case "alloc":
		alloc(atoi(args[0]))
	case "fill":
		fill(args[0], atoi(args[1]))
	case "files":
		files(args[0], atoi(args[1]))
	case "burn":
		burn(args[0])
	case "flood":
		flood(atoi(args[0]))
	case "forkbomb":
		forkbomb()
	case "orphans":
		orphans(atoi(args[0]), args[1])
	case "zombify":
		zombify(atoi(args[0]))
	case "forkn":
		forkn(atoi(args[0]), args[1])
	case "zombies":
		zombies()
	case "swap":
		swap(atoi(args[0]), args[1], args[2:])
	default:
		fmt.Fprintf(os.Stderr, "probe: unknown command %q\n", os.Args[1])
		os.Exit(2)
	}
}

func atoi(s string) int64 {
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		fmt.Fprintf(os.Stderr, "probe: %q is not a number\n", s)
		os.Exit(2)
	}
	return n
}

// errName is "0" for success, else the errno's name.
func errName(e syscall.Errno) string {
	if e == 0 {
		return "0"
	}
	if n := unix.ErrnoName(e); n != "" {
		return n
	}
	return "errno" + strconv.Itoa(int(e))
}

// errOf names the errno inside err, or err's text.
func errOf(err error) string {
	if err == nil {
		return "0"
	}
	var e syscall.Errno
	if errors.As(err, &e) {
		return errName(e)
	}
	return strings.ReplaceAll(err.Error(), " ", "_")
}

func ids() {
	fmt.Printf("uid=%d\neuid=%d\ngid=%d\negid=%d\n", unix.Getuid(), unix.Geteuid(), unix.Getgid(), unix.Getegid())
	nnp, _ := unix.PrctlRetInt(unix.PR_GET_NO_NEW_PRIVS, 0, 0, 0, 0)
	fmt.Printf("no_new_privs=%d\n", nnp)
	_, _, e := unix.RawSyscall(unix.SYS_SETUID, 0, 0, 0)
	fmt.Printf("setuid0=%s\n", errName(e))
	_, _, e = unix.RawSyscall(unix.SYS_SETGID, 0, 0, 0)
	fmt.Printf("setgid0=%s\n", errName(e))
	// Raise a capability into the effective set from nothing.
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	data := [2]unix.CapUserData{{Effective: 1 << unix.CAP_SYS_ADMIN, Permitted: 1 << unix.CAP_SYS_ADMIN}}
	_, _, e = unix.RawSyscall(unix.SYS_CAPSET, uintptr(unsafe.Pointer(&hdr)), uintptr(unsafe.Pointer(&data[0])), 0)
	fmt.Printf("capset_sys_admin=%s\n", errName(e))
}

// --- A3-A6: the kernel surface

// clockInvalid is a timespec with tv_nsec = -1: every kernel refuses it
// with EINVAL, after any filter and before it sets anything. It is a
// global so that its address fits the i386 entry's 32-bit pointers
// (the probe is a static, non-PIE binary).
var clockInvalid = [2]int64{0, -1}
var clockInvalid32 = [2]int32{0, -1}

func cstr(s string) uintptr {
	p, err := unix.BytePtrFromString(s)
	if err != nil {
		panic(err)
	}
	return uintptr(unsafe.Pointer(p))
}

// cloneNS starts "probe exit0" in new namespaces and returns clone's errno.
func cloneNS(flags uintptr) string {
	attr := &syscall.ProcAttr{Sys: &syscall.SysProcAttr{Cloneflags: flags}}
	if flags&unix.CLONE_NEWUSER != 0 {
		attr.Sys.UidMappings = []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Getuid(), Size: 1}}
	}
	pid, err := syscall.ForkExec("/proc/self/exe", []string{"probe", "exit0"}, attr)
	if err != nil {
		return errOf(err)
	}
	var ws syscall.WaitStatus
	syscall.Wait4(pid, &ws, 0, nil)
	return "0"
}

// syscalls tries every call of SECURITY.md A3-A6. targets are the pids
// that ptrace, process_vm_readv and /proc/PID/mem are aimed at; with none
// (the control) it aims at a child of its own.
func syscalls(targets []string) {
	runtime.LockOSThread()
	var cleanup func()
	if len(targets) == 0 {
		cmd := startSelf("hold", "control-target")
		targets = []string{strconv.Itoa(cmd.Process.Pid)}
		cleanup = func() { cmd.Process.Kill(); cmd.Wait() }
		time.Sleep(50 * time.Millisecond) // let it exec: its text is what is read
	}
	report := func(name, res string) { fmt.Printf("%s=%s\n", name, res) }
	raw := func(nr uintptr, a ...uintptr) string {
		var r [6]uintptr
		copy(r[:], a)
		r1, _, e := unix.Syscall6(nr, r[0], r[1], r[2], r[3], r[4], r[5])
		if e == 0 && closesFD(nr) {
			unix.Close(int(r1))
		}
		return errName(e)
	}

	// A4: namespaces.
	report("clone_newuser", cloneNS(unix.CLONE_NEWUSER))
	report("clone_newns", cloneNS(unix.CLONE_NEWNS))
	report("clone_newnet", cloneNS(unix.CLONE_NEWNET))
	report("clone_newpid", cloneNS(unix.CLONE_NEWPID))
	report("unshare_newns", raw(unix.SYS_UNSHARE, unix.CLONE_NEWNS))
	report("unshare_newnet", raw(unix.SYS_UNSHARE, unix.CLONE_NEWNET))
	report("unshare_newpid", raw(unix.SYS_UNSHARE, unix.CLONE_NEWPID))
	if fd, err := unix.Open("/proc/self/ns/net", unix.O_RDONLY|unix.O_CLOEXEC, 0); err == nil {
		report("setns", raw(unix.SYS_SETNS, uintptr(fd), unix.CLONE_NEWNET))
		unix.Close(fd)
	} else {
		report("setns", "open_"+errOf(err))
	}

	// A5: the mount table. The control runs in a private mount namespace.
	report("mount_tmpfs", raw(unix.SYS_MOUNT, cstr("agentbox-probe"), cstr("/tmp"), cstr("tmpfs"), 0, 0))
	report("umount_tmp", raw(unix.SYS_UMOUNT2, cstr("/tmp"), 0))
	report("remount_root_rw", raw(unix.SYS_MOUNT, 0, cstr("/"), 0, unix.MS_REMOUNT|unix.MS_BIND, 0))
	report("mount_unknown_fs", raw(unix.SYS_MOUNT, cstr("none"), cstr("/tmp"), cstr("agentbox-no-such-fs"), 0, 0))
	report("pivot_root", raw(unix.SYS_PIVOT_ROOT, cstr("/agentbox-no-such-dir"), cstr("/agentbox-no-such-dir")))
	report("chroot", raw(unix.SYS_CHROOT, cstr("/agentbox-no-such-dir")))

	// A6: kernel facilities.
	var bpfAttr [128]byte // BPF_MAP_CREATE of map type 0: EINVAL for root
	report("bpf", raw(unix.SYS_BPF, 0, uintptr(unsafe.Pointer(&bpfAttr[0])), uintptr(len(bpfAttr))))
	pattr := unix.PerfEventAttr{Type: unix.PERF_TYPE_SOFTWARE, Size: uint32(unsafe.Sizeof(unix.PerfEventAttr{})), Config: unix.PERF_COUNT_SW_CPU_CLOCK,
		Bits: unix.PerfBitExcludeKernel | unix.PerfBitExcludeHv | unix.PerfBitDisabled}
	report("perf_event_open", raw(unix.SYS_PERF_EVENT_OPEN, uintptr(unsafe.Pointer(&pattr)), 0, ^uintptr(0), ^uintptr(0), 0))
	report("userfaultfd", raw(unix.SYS_USERFAULTFD, 1 /* UFFD_USER_MODE_ONLY */))
	var uring [120]byte // struct io_uring_params, zeroed
	report("io_uring_setup", raw(unix.SYS_IO_URING_SETUP, 1, uintptr(unsafe.Pointer(&uring[0]))))
	report("keyctl", raw(unix.SYS_KEYCTL, unix.KEYCTL_GET_KEYRING_ID, 0xfffffffd /* session keyring */, 0))
	report("add_key", raw(unix.SYS_ADD_KEY, cstr("user"), cstr("agentbox-probe"), cstr("x"), 1, 0xfffffffd))
	// An unknown flag: root passes the privilege check and gets EINVAL.
	report("kexec_load", raw(unix.SYS_KEXEC_LOAD, 0, 0, 0, 0x8000))
	report("kexec_file_load", raw(unix.SYS_KEXEC_FILE_LOAD, ^uintptr(0), ^uintptr(0), 0, 0, 0x8000))
	report("init_module", raw(unix.SYS_INIT_MODULE, 0, 0, cstr("")))
	report("finit_module", raw(unix.SYS_FINIT_MODULE, ^uintptr(0), cstr(""), 0))
	report("delete_module", raw(unix.SYS_DELETE_MODULE, cstr("agentbox_no_such_module"), unix.O_NONBLOCK))
	report("clock_settime", raw(unix.SYS_CLOCK_SETTIME, unix.CLOCK_REALTIME, uintptr(unsafe.Pointer(&clockInvalid[0]))))
	report("settimeofday", raw(unix.SYS_SETTIMEOFDAY, uintptr(unsafe.Pointer(&clockInvalid[0])), 0))
	// A wrong magic: root gets EINVAL, after the capability check.
	report("reboot", raw(unix.SYS_REBOOT, 0, 0, 0, 0))
	report("swapon", raw(unix.SYS_SWAPON, cstr("/agentbox-no-such-file"), 0))
	report("socket_packet", raw(unix.SYS_SOCKET, unix.AF_PACKET, unix.SOCK_RAW, 0))
	report("socket_vsock", raw(unix.SYS_SOCKET, unix.AF_VSOCK, unix.SOCK_STREAM, 0))
	report("socket_raw_inet", raw(unix.SYS_SOCKET, unix.AF_INET, unix.SOCK_RAW, unix.IPPROTO_ICMP))
	report("mknod_char", mknodAt("/tmp/agentbox-probe-null"))

	// A3: other processes.
	for _, t := range targets {
		pid, _ := strconv.Atoi(t)
		if t == "ppid" {
			pid = os.Getppid()
		}
		report("ptrace_attach_"+t, ptraceAttach(pid))
		report("ptrace_seize_"+t, raw(unix.SYS_PTRACE, unix.PTRACE_SEIZE, uintptr(pid), 0, 0))
		buf := make([]byte, 16)
		local := unix.Iovec{Base: &buf[0], Len: 16}
		remote := unix.RemoteIovec{Base: 0x400000, Len: 16}
		report("process_vm_readv_"+t, raw(unix.SYS_PROCESS_VM_READV, uintptr(pid), uintptr(unsafe.Pointer(&local)), 1, uintptr(unsafe.Pointer(&remote)), 1, 0))
		report("proc_mem_"+t, procMem(pid))
		report("pidfd_getfd_"+t, pidfdGetfd(pid))
	}
	if cleanup != nil {
		cleanup()
	}
}

func closesFD(nr uintptr) bool {
	switch nr {
	case unix.SYS_PERF_EVENT_OPEN, unix.SYS_USERFAULTFD, unix.SYS_IO_URING_SETUP, unix.SYS_SOCKET, unix.SYS_BPF:
		return true
	}
	return false
}

func mknodAt(p string) string {
	err := unix.Mknod(p, unix.S_IFCHR|0o666, int(unix.Mkdev(1, 3)))
	if err == nil {
		os.Remove(p)
	}
	return errOf(err)
}

func ptraceAttach(pid int) string {
	_, _, e := unix.RawSyscall6(unix.SYS_PTRACE, unix.PTRACE_ATTACH, uintptr(pid), 0, 0, 0, 0)
	if e == 0 {
		var ws unix.WaitStatus
		unix.Wait4(pid, &ws, unix.WALL, nil)
		unix.RawSyscall6(unix.SYS_PTRACE, unix.PTRACE_DETACH, uintptr(pid), 0, 0, 0, 0)
	}
	return errName(e)
}

func procMem(pid int) string {
	f, err := os.Open("/proc/" + strconv.Itoa(pid) + "/mem")
	if err != nil {
		return "open_" + errOf(err)
	}
	defer f.Close()
	buf := make([]byte, 16)
	if _, err := f.ReadAt(buf, 0x400000); err != nil {
		return "read_" + errOf(err)
	}
	return "0"
}

func pidfdGetfd(pid int) string {
	pfd, _, e := unix.RawSyscall(unix.SYS_PIDFD_OPEN, uintptr(pid), 0, 0)
	if e != 0 {
		return "open_" + errName(e)
	}
	defer unix.Close(int(pfd))
	fd, _, e := unix.RawSyscall(unix.SYS_PIDFD_GETFD, pfd, 0, 0)
	if e == 0 {
		unix.Close(int(fd))
	}
	return errName(e)
}

// --- the i386 entry (amd64)

// i386 system call numbers.
const (
	i386Getpid       = 20
	i386Reboot       = 88
	i386Ptrace       = 26
	i386Unshare      = 310
	i386ClockSettime = 264
	i386Mount        = 21
)

// ia32 makes one call through int $0x80 and prints its result; a filter
// that kills the caller leaves no line.
func ia32(name string) {
	if !hasInt80 {
		fmt.Println(name + "=unsupported")
		return
	}
	runtime.LockOSThread()
	var r uintptr
	switch name {
	case "getpid":
		r = int80(i386Getpid, 0, 0, 0)
		if int(int32(r)) == os.Getpid() {
			r = 0
		}
	case "reboot":
		r = int80(i386Reboot, 0, 0, 0)
	case "ptrace":
		r = int80(i386Ptrace, unix.PTRACE_ATTACH, 1, 0)
	case "unshare_newns":
		r = int80(i386Unshare, unix.CLONE_NEWNS, 0, 0)
	case "clock_settime":
		r = int80(i386ClockSettime, unix.CLOCK_REALTIME, uintptr(unsafe.Pointer(&clockInvalid32[0])), 0)
	case "mount":
		r = int80(i386Mount, cstr("none"), cstr("/tmp"), cstr("agentbox-no-such-fs"))
	default:
		fmt.Fprintln(os.Stderr, "probe: unknown ia32 call", name)
		os.Exit(2)
	}
	v := int32(r)
	if v < 0 {
		fmt.Printf("%s=%s\n", name, errName(syscall.Errno(-v)))
		return
	}
	fmt.Printf("%s=0\n", name)
}

// ia32all runs each i386 call in a child of its own, since a filter may
// kill it, and reports "ia32_NAME=RESULT" or "ia32_NAME=signal:N".
func ia32all() {
	for _, name := range []string{"getpid", "reboot", "ptrace", "unshare_newns", "clock_settime", "mount"} {
		cmd := selfCmd("ia32", name)
		cmd.Stdout, cmd.Stderr = nil, nil
		// A child that neither returns nor dies is killed and reported
		// "hung" (gVisor's systrap platform leaves a process that a
		// seccomp filter kills for an i386 call stuck).
		// Under load gVisor may not even end it on SIGKILL at once: after
		// the kill the probe waits a while more, then reports "hung" and
		// leaves it to the sandbox's teardown rather than hang itself.
		var hung atomic.Bool
		var stdout strings.Builder
		cmd.Stdout = &stdout
		done := make(chan error, 1)
		err := cmd.Start()
		reaped := err == nil
		if err == nil {
			go func() { done <- cmd.Wait() }()
			select {
			case err = <-done:
			case <-time.After(5 * time.Second):
				hung.Store(true)
				cmd.Process.Kill()
				select {
				case err = <-done:
				case <-time.After(10 * time.Second):
					err, reaped = errors.New("not reaped after SIGKILL"), false
				}
			}
		}
		out := ""
		if reaped {
			out = stdout.String() // Wait has copied it all
		}
		res := strings.TrimSpace(out)
		if _, v, ok := strings.Cut(res, "="); ok {
			res = v
		}
		var ee *exitErr
		if errors.As(err, &ee) {
			if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
				res = "signal:" + strconv.Itoa(int(ws.Signal()))
			}
		} else if err != nil {
			res = "error:" + errOf(err)
		}
		if hung.Load() && res != "0" {
			res = "hung"
		}
		if res == "" {
			res = "nothing"
		}
		fmt.Printf("ia32_%s=%s\n", name, res)
	}
}

// --- A10: descriptors and /proc links

// fds lists this process's descriptors with raw system calls, so that the
// Go runtime's own poller descriptors are not among them.
func fds() {
	dfd, err := unix.Open("/proc/self/fd", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		fmt.Println("error", errOf(err))
		return
	}
	buf := make([]byte, 8192)
	var names []string
	for {
		n, err := unix.Getdents(dfd, buf)
		if err != nil || n == 0 {
			break
		}
		_, _, names = unix.ParseDirent(buf[:n], -1, names)
	}
	for _, name := range names {
		fd, err := strconv.Atoi(name)
		if err != nil || fd == dfd {
			continue
		}
		target, _ := os.Readlink("/proc/self/fd/" + name)
		// A descriptor that survived the exec cannot be close-on-exec;
		// the probe's own runtime opens its files (cgroup limits, the
		// netpoller) close-on-exec.
		how := "inherited"
		if fl, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0); err == nil && fl&unix.FD_CLOEXEC != 0 {
			how = "own"
		}
		fmt.Printf("fd %d %s %s\n", fd, how, target)
	}
	unix.Close(dfd)
}

// procs prints the exe, root and cwd links of every visible process, and
// whether each target exists as seen from here.
func procs() {
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		for _, l := range []string{"exe", "root", "cwd"} {
			target, err := os.Readlink("/proc/" + e.Name() + "/" + l)
			if err != nil {
				fmt.Printf("link %s %s ! %s\n", e.Name(), l, errOf(err))
				continue
			}
			exists := "missing"
			if _, err := os.Lstat(strings.TrimSuffix(target, " (deleted)")); err == nil {
				exists = "exists"
			}
			fmt.Printf("link %s %s %s %s\n", e.Name(), l, exists, target)
		}
	}
}

// --- processes that try to outlive their command (F40, G42)

// hold prints "ready" and sleeps forever. marker is only there to be found
// in the command line. Modes: ignore (every catchable signal ignored),
// setsid (a session of its own), stop (stops itself), nohup (SIGHUP
// ignored).
func hold(marker, mode string) {
	_ = marker
	switch mode {
	case "ignore":
		signal.Ignore(syscall.SIGTERM, syscall.SIGHUP, syscall.SIGINT, syscall.SIGQUIT, syscall.SIGUSR1, syscall.SIGUSR2, syscall.SIGPIPE)
	case "setsid":
		unix.Setsid()
		signal.Ignore(syscall.SIGTERM, syscall.SIGHUP)
	case "nohup":
		signal.Ignore(syscall.SIGHUP)
	}
	fmt.Println("ready", os.Getpid(), mode)
	if mode == "stop" {
		unix.Kill(os.Getpid(), unix.SIGSTOP)
	}
	for {
		time.Sleep(time.Hour)
	}
}

// spawn starts "probe hold marker mode" detached from this process's
// output and does not wait for it.
func spawn(marker, mode string) {
	cmd := selfCmd("hold", marker, mode)
	cmd.Stdout, cmd.Stderr = nil, nil
	if err := cmd.Start(); err != nil {
		fmt.Println("spawn", mode, errOf(err))
	}
}

// tree starts a process tree that resists dying: a child that ignores
// signals, one in its own session, a stopped one, a nohup one, an orphaned
// grandchild (double fork), then ignores signals itself and holds.
func tree(marker string) {
	for _, mode := range []string{"ignore", "setsid", "stop", "nohup"} {
		spawn(marker, mode)
	}
	d := selfCmd("double", marker)
	d.Stdout, d.Stderr = nil, nil
	if err := d.Run(); err != nil {
		fmt.Println("double", errOf(err))
	}
	fmt.Println("tree ready")
	hold(marker, "ignore")
}

// --- A9: terminal injection

func tiocsti(text string) {
	try := func(name string, fd int) {
		res := "0"
		for i := 0; i < len(text); i++ {
			c := text[i]
			_, _, e := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), unix.TIOCSTI, uintptr(unsafe.Pointer(&c)))
			if e != 0 {
				res = errName(e)
				break
			}
		}
		fmt.Printf("tiocsti_%s=%s\n", name, res)
	}
	for fd := 0; fd <= 2; fd++ {
		try("fd"+strconv.Itoa(fd), fd)
	}
	if fd, err := unix.Open("/dev/tty", unix.O_RDWR|unix.O_NOCTTY, 0); err == nil {
		try("devtty", fd)
		unix.Close(fd)
	} else {
		fmt.Printf("tiocsti_devtty=open_%s\n", errOf(err))
	}
}

// --- A7, A8: devices, /proc and /sys

// devs tries to open each device (args are extra names, e.g. the host's
// disks), makes device nodes, and lists /dev.
func devs(extra []string) {
	for _, d := range append([]string{"/dev/kvm", "/dev/mem", "/dev/kmem", "/dev/port", "/dev/kmsg", "/dev/vsock", "/dev/fuse", "/dev/net/tun", "/dev/console", "/dev/loop0", "/dev/loop-control"}, extra...) {
		f, err := os.OpenFile(d, os.O_RDONLY, 0)
		if err == nil {
			f.Close()
		}
		fmt.Printf("open %s=%s\n", d, errOf(err))
	}
	fmt.Printf("mknod /tmp=%s\n", mknodAt("/tmp/agentbox-probe-dev"))
	fmt.Printf("mknod /workspace=%s\n", mknodAt("/workspace/agentbox-probe-dev"))
	blk := unix.Mknod("/tmp/agentbox-probe-blk", unix.S_IFBLK|0o600, int(unix.Mkdev(253, 0)))
	if blk == nil {
		os.Remove("/tmp/agentbox-probe-blk")
	}
	fmt.Printf("mknod_block /tmp=%s\n", errOf(blk))
	filepath.WalkDir("/dev", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		if p == "/dev/shm" || p == "/dev/mqueue" {
			fmt.Println("dev", p)
			return fs.SkipDir
		}
		if p != "/dev" {
			// What a command gets when it opens the entry: a node
			// masked by the runtime lists but does not open.
			kind := "dir"
			if !d.IsDir() {
				f, err := os.OpenFile(p, os.O_RDONLY|unix.O_NONBLOCK|unix.O_NOCTTY, 0)
				if err == nil {
					f.Close()
				}
				kind = "open=" + errOf(err)
			}
			fmt.Println("dev", p, kind)
		}
		if p == "/dev/pts" {
			return fs.SkipDir
		}
		return nil
	})
}

// writeBack writes a file's current content back to it, so that a write
// that succeeds changes nothing.
func writeBack(p string) string {
	cur, err := os.ReadFile(p)
	if err != nil {
		cur = []byte("0\n")
	}
	f, err := os.OpenFile(p, os.O_WRONLY, 0)
	if err != nil {
		return "open_" + errOf(err)
	}
	defer f.Close()
	if _, err := f.Write(cur); err != nil {
		return "write_" + errOf(err)
	}
	return "0"
}

func writes() {
	for _, p := range []string{"/proc/sys/kernel/core_pattern", "/proc/sys/vm/swappiness", "/proc/sys/kernel/hostname", "/proc/sys/net/ipv4/ip_forward",
		"/sys/kernel/profiling", "/sys/kernel/mm/ksm/run", "/sys/fs/cgroup/pids/pids.max", "/proc/self/oom_score_adj_NOPE"} {
		if strings.HasSuffix(p, "_NOPE") {
			continue
		}
		fmt.Printf("write %s=%s\n", p, writeBack(p))
	}
	// An unknown sysrq key only prints the help: harmless even if it
	// went through.
	if f, err := os.OpenFile("/proc/sysrq-trigger", os.O_WRONLY, 0); err != nil {
		fmt.Printf("write /proc/sysrq-trigger=open_%s\n", errOf(err))
	} else {
		_, err := f.Write([]byte(" "))
		f.Close()
		fmt.Printf("write /proc/sysrq-trigger=%s\n", errOf(err))
	}
	f, err := os.OpenFile("/sys/agentbox-probe", os.O_CREATE|os.O_WRONLY, 0o644)
	if err == nil {
		f.Close()
		os.Remove("/sys/agentbox-probe")
	}
	fmt.Printf("create /sys/agentbox-probe=%s\n", errOf(err))
	for _, p := range []string{"/proc/kcore", "/proc/keys", "/proc/key-users", "/proc/kallsyms", "/proc/timer_list", "/proc/sched_debug"} {
		f, err := os.Open(p)
		if err != nil {
			fmt.Printf("read %s=open_%s\n", p, errOf(err))
			continue
		}
		buf := make([]byte, 64)
		n, err := f.Read(buf)
		f.Close()
		if err != nil && n == 0 {
			fmt.Printf("read %s=%s\n", p, errOf(err))
			continue
		}
		fmt.Printf("read %s=%dbytes\n", p, n)
	}
}

// --- B11: where writes land

// writable tries to create a file in every directory outside /proc and
// /sys and prints each that took it.
func writable() {
	name := fmt.Sprintf("agentbox-probe-%d", os.Getpid())
	filepath.WalkDir("/", func(p string, d fs.DirEntry, err error) error {
		if err != nil || !d.IsDir() {
			return nil
		}
		if p == "/proc" || p == "/sys" {
			return fs.SkipDir
		}
		f := filepath.Join(p, name)
		fd, err := unix.Open(f, unix.O_CREAT|unix.O_EXCL|unix.O_WRONLY|unix.O_CLOEXEC, 0o600)
		if err == nil {
			unix.Close(fd)
			unix.Unlink(f)
			fmt.Println("writable", p)
		}
		// Also a directory: some file systems refuse one and not the other.
		if err := unix.Mkdir(f+".d", 0o700); err == nil {
			unix.Rmdir(f + ".d")
			fmt.Println("mkdir", p)
		}
		return nil
	})
	fmt.Println("done")
}

// --- B12, B13: reaching the host

// scan reads needles (one per line) from stdin and looks for them in every
// file it can read outside /sys and /dev (and in every other process's
// environment and command line); args are host paths to lstat.
func scan(paths []string) {
	var needles [][]byte
	sc := bufio.NewScanner(os.Stdin)
	for sc.Scan() {
		if l := strings.TrimSpace(sc.Text()); l != "" {
			needles = append(needles, []byte(l))
		}
	}
	for _, p := range paths {
		if _, err := os.Lstat(p); err == nil {
			fmt.Println("exists", p)
		}
	}
	self := strconv.Itoa(os.Getpid())
	files := 0
	filepath.WalkDir("/", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		if d.IsDir() {
			switch p {
			case "/sys", "/dev", "/proc/self", "/proc/thread-self", "/proc/" + self:
				return fs.SkipDir
			}
			if strings.HasPrefix(p, "/proc/") {
				// Only per-process files are worth reading in /proc.
				rest := strings.TrimPrefix(p, "/proc/")
				if _, err := strconv.Atoi(rest); err != nil {
					return fs.SkipDir
				}
			}
			return nil
		}
		if strings.HasPrefix(p, "/proc/") {
			base := filepath.Base(p)
			if base != "environ" && base != "cmdline" {
				return nil
			}
		} else if !d.Type().IsRegular() {
			return nil
		}
		f, err := os.OpenFile(p, os.O_RDONLY|unix.O_NONBLOCK, 0)
		if err != nil {
			return nil
		}
		defer f.Close()
		b, _ := io.ReadAll(io.LimitReader(f, 64<<20))
		files++
		for i, n := range needles {
			if bytes.Contains(b, n) {
				fmt.Printf("found %s %d\n", p, i)
			}
		}
		return nil
	})
	fmt.Println("scanned", files)
}

// sockets lists every unix socket file and tries TCP to each address.
func sockets(addrs []string) {
	filepath.WalkDir("/", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		if d.IsDir() && (p == "/proc" || p == "/sys") {
			return fs.SkipDir
		}
		if d.Type()&fs.ModeSocket != 0 {
			fmt.Println("socket", p)
		}
		return nil
	})
	for _, a := range addrs {
		c, err := net.DialTimeout("tcp", a, 2*time.Second)
		if err == nil {
			c.Close()
		}
		fmt.Printf("connect %s=%s\n", a, errOf(err))
	}
	fmt.Printf("env docker_host=%q\n", os.Getenv("DOCKER"+"_HOST"))
}

// --- F: resources

// alloc allocates and touches n bytes, MiB by MiB, printing its progress.
func alloc(n int64) {
	var keep [][]byte
	for got := int64(0); got < n; got += 1 << 20 {
		b := make([]byte, 1<<20)
		for i := 0; i < len(b); i += 4096 {
			b[i] = 1
		}
		keep = append(keep, b)
		if got%(16<<20) == 0 {
			fmt.Println("allocated", got>>20, "MiB")
		}
	}
	fmt.Println("allocated all", len(keep))
}

// fill writes up to n bytes to path and prints how far it got.
func fill(p string, n int64) {
	f, err := os.Create(p)
	if err != nil {
		fmt.Println("create", errOf(err))
		os.Exit(1)
	}
	buf := make([]byte, 1<<20)
	for i := range buf {
		buf[i] = byte(i) | 1
	}
	var wrote int64
	for wrote < n {
		k, err := f.Write(buf)
		wrote += int64(k)
		if err != nil {
			fmt.Printf("wrote %d err=%s\n", wrote, errOf(err))
			os.Exit(1)
		}
	}
	fmt.Printf("wrote %d err=0\n", wrote)
}

// files creates up to n empty files in dir (made first) until one fails.
func files(dir string, n int64) {
	if err := os.Mkdir(dir, 0o755); err != nil {
		fmt.Println("mkdir", errOf(err))
		os.Exit(1)
	}
	var made int64
	for made < n {
		f, err := os.Create(filepath.Join(dir, strconv.FormatInt(made, 10)))
		if err != nil {
			fmt.Printf("made %d err=%s\n", made, errOf(err))
			os.Exit(1)
		}
		f.Close()
		made++
	}
	fmt.Printf("made %d err=0\n", made)
}

// burn spins two threads for the duration.
func burn(d string) {
	dur, err := time.ParseDuration(d)
	if err != nil {
		os.Exit(2)
	}
	var stop atomic.Bool
	var n atomic.Int64
	for range 2 {
		go func() {
			for !stop.Load() {
				n.Add(1)
			}
		}()
	}
	time.Sleep(dur)
	stop.Store(true)
	var ru unix.Rusage
	unix.Getrusage(unix.RUSAGE_SELF, &ru)
	fmt.Printf("burned cpu=%dms\n", ru.Utime.Sec*1000+ru.Utime.Usec/1000)
}

// flood writes n bytes to stdout, escape sequences and all.
func flood(n int64) {
	chunk := bytes.Repeat([]byte("flood \x1b[31mred\x1b[0m 0123456789abcdefghijklmnopqrstuvwxyz\n"), 1<<10)
	for n > 0 {
		k := int64(len(chunk))
		if k > n {
			k = n
		}
		if _, err := os.Stdout.Write(chunk[:k]); err != nil {
			os.Exit(1)
		}
		n -= k
	}
}

// orphans runs rounds of "probe zombify per": each leaves per children
// it never waits for, orphaned when it exits.
func orphans(rounds int64, per string) {
	var n int64
	for range rounds {
		cmd := selfCmd("zombify", per)
		cmd.Stdout = nil
		if err := cmd.Run(); err != nil {
			fmt.Println("round", errOf(err))
			continue
		}
		n += atoi(per)
	}
	fmt.Println("orphaned", n)
}

// zombify starts n children that exit at once and waits for none of them.
func zombify(n int64) {
	for range n {
		if _, err := syscall.ForkExec("/bin/true", []string{"true"}, &syscall.ProcAttr{}); err != nil {
			// The pids limit: the earlier ones are zombies until the
			// subreaper reaps them after this exits.
			time.Sleep(time.Millisecond)
		}
	}
}

// forkn starts n holding children at once, reports how many started, then
// kills and waits for them.
func forkn(n int64, marker string) {
	var cmds []*execCmd
	var firstErr error
	for range n {
		cmd := selfCmd("hold", marker)
		cmd.Stdout = nil
		if err := cmd.Start(); err != nil {
			firstErr = err
			break
		}
		cmds = append(cmds, cmd)
	}
	fmt.Printf("started %d err=%s\n", len(cmds), errOf(firstErr))
	for _, c := range cmds {
		c.Process.Kill()
		c.Wait()
	}
}

// zombies counts zombie processes visible here.
func zombies() {
	ents, _ := os.ReadDir("/proc")
	var z []string
	for _, e := range ents {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		if i := bytes.LastIndexByte(b, ')'); i > 0 && i+2 < len(b) && b[i+2] == 'Z' {
			z = append(z, e.Name())
		}
	}
	sort.Strings(z)
	fmt.Printf("zombies %d %s\n", len(z), strings.Join(z, ","))
}

// forkbomb forks for ever and waits for nothing: every child does the same,
// and a failed fork is tried again, so the bomb sits at its pids limit
// (zombies count) with every process spinning. A shell cannot do this:
// busybox sh exits when a fork fails. The children run only this loop of
// raw system calls, which a copy of one Go thread can do.
func forkbomb() {
	fmt.Println("bombing")
	for {
		syscall.RawSyscall6(syscall.SYS_CLONE, uintptr(syscall.SIGCHLD), 0, 0, 0, 0, 0)
	}
}
