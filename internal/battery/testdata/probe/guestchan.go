package main

import (
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// --- H44: the guest's control channel

// guestchan tries everything SECURITY.md H44 says a command may not do to
// the guest: connect to the sockets of its run directory (and any other
// socket under /run, /workspace, /tmp and /dev/shm, and the extra paths in
// args[1:]), open or read the guest's /proc files and descriptors, trace
// it, and signal it. args[0] names the targets, comma-separated: a pid,
// "ppid" (the command's reaper), "guests" (every process running the
// guest binary that is not a reaper) or "child" (a child of the probe's
// own, the control's target). Each result is "LABEL:WHAT=RESULT", 0 for
// success. Signals that would end the target come last, each result
// printed before the next is sent.
func guestchan(args []string) {
	runtime.LockOSThread() // ptrace: attach, wait and detach on one thread
	var targets []string
	var cleanup func()
	pids := map[string]int{}
	for _, t := range strings.Split(args[0], ",") {
		switch t {
		case "":
		case "ppid":
			pids[t] = os.Getppid()
			targets = append(targets, t)
		case "child":
			cmd := startSelf("hold", "guestchan-target", "ignore")
			pids[t] = cmd.Process.Pid
			targets = append(targets, t)
			cleanup = func() { cmd.Process.Kill(); cmd.Wait() }
			time.Sleep(100 * time.Millisecond) // let it exec and settle
		case "guests":
			for _, pid := range guestPids() {
				label := "guest" + strconv.Itoa(pid)
				if _, ok := pids[label]; !ok && !slices.Contains(targets, strconv.Itoa(pid)) {
					pids[label] = pid
					targets = append(targets, label)
				}
			}
		default:
			pid, err := strconv.Atoi(t)
			if err != nil {
				fmt.Fprintf(os.Stderr, "probe: target %q is not a pid\n", t)
				os.Exit(2)
			}
			pids[t] = pid
			targets = append(targets, t)
		}
	}
	// The socket walk below takes a while; a guest found above must
	// still be one after it (see guestPids).
	var socks []string
	for _, root := range []string{"/run", "/var/run", "/workspace", "/tmp", "/dev/shm"} {
		filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
			if err == nil && d.Type()&fs.ModeSocket != 0 {
				socks = append(socks, p)
			}
			return nil
		})
	}
	still := guestPids()
	targets = slices.DeleteFunc(targets, func(t string) bool {
		return strings.HasPrefix(t, "guest") && !slices.Contains(still, pids[t])
	})
	fmt.Println("targets", strings.Join(targets, " "))
	for _, t := range targets {
		fmt.Printf("target %s %d\n", t, pids[t])
	}

	// The sockets: the paths the guest dials, then every one found.
	dial := append([]string{"/run/agentbox/agentbox.sock", "/run/agentbox/egress.sock"}, args[1:]...)
	for _, t := range targets {
		dial = append(dial, fmt.Sprintf("/proc/%d/root/run/agentbox/agentbox.sock", pids[t]))
	}
	for _, p := range socks {
		if !slices.Contains(dial, p) {
			dial = append(dial, p)
		}
	}
	socks = dial
	if ents, err := os.ReadDir("/run/agentbox"); err != nil {
		fmt.Printf("readdir /run/agentbox=%s\n", errOf(err))
	} else {
		var names []string
		for _, e := range ents {
			names = append(names, e.Name())
		}
		fmt.Printf("readdir /run/agentbox=0\nlisting /run/agentbox %s\n", strings.Join(names, " "))
	}
	for _, s := range socks {
		fmt.Printf("connect %s=%s\n", s, connectUnix(s))
	}

	for _, t := range targets {
		procProbes(t, pids[t])
	}
	// Signals last: a success against the guest may end the sandbox.
	// SIGSTOP is taken back at once; SIGTERM and SIGKILL come at the very
	// end, after every other result is out. The command's own reaper is
	// left alone: it is not the guest, and it runs as the command's user.
	signalled := slices.DeleteFunc(slices.Clone(targets), func(t string) bool { return t == "ppid" })
	for _, t := range signalled {
		pid := pids[t]
		report := func(what, res string) { fmt.Printf("%s:%s=%s\n", t, what, res) }
		report("kill_0", errName(rawKill(pid, 0)))
		report("pidfd_signal_0", pidfdSignal(pid, 0))
		e := rawKill(pid, syscall.SIGSTOP)
		if e == 0 {
			rawKill(pid, syscall.SIGCONT)
		}
		report("kill_STOP", errName(e))
		_, _, e = unix.RawSyscall(unix.SYS_TGKILL, uintptr(pid), uintptr(pid), uintptr(syscall.SIGSTOP))
		if e == 0 {
			rawKill(pid, syscall.SIGCONT)
		}
		report("tgkill_STOP", errName(e))
		res := pidfdSignal(pid, syscall.SIGSTOP)
		if res == "0" {
			rawKill(pid, syscall.SIGCONT)
		}
		report("pidfd_signal_STOP", res)
	}
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGKILL} {
		name := map[syscall.Signal]string{syscall.SIGTERM: "TERM", syscall.SIGKILL: "KILL"}[sig]
		for _, t := range signalled {
			fmt.Printf("%s:pidfd_signal_%s=%s\n", t, name, pidfdSignal(pids[t], sig))
			fmt.Printf("%s:kill_%s=%s\n", t, name, errName(rawKill(pids[t], sig)))
		}
	}
	if cleanup != nil {
		cleanup()
	}
	fmt.Println("done")
}

// guestPids lists the processes running the guest binary as the init
// (not as a reaper), found by their command lines. A process of the
// probe's own user is left out: that is a reaper the guest is starting,
// between its fork (credentials already the sandbox user's) and its exec
// (the command line still the guest's), which the sandbox user may signal
// like any reaper of its own. One caught even earlier, before its
// credentials changed, is a reaper when guestchan looks again.
func guestPids() []int {
	var out []int
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		if err != nil {
			continue
		}
		argv := strings.Split(strings.TrimRight(string(b), "\x00"), "\x00")
		if len(argv) > 0 && strings.HasSuffix(argv[0], "agentbox-guest") && (len(argv) < 2 || argv[1] != "reaper") && procUID(pid) != os.Getuid() {
			out = append(out, pid)
		}
	}
	return out
}

// procUID is the real user id of process pid, -1 if unknown.
func procUID(pid int) int {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return -1
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "Uid:"); ok {
			if f := strings.Fields(rest); len(f) > 0 {
				if uid, err := strconv.Atoi(f[0]); err == nil {
					return uid
				}
			}
		}
	}
	return -1
}

// connectUnix connects to a unix socket and, when that works, sends a
// frame no guest sends (the daemon must refuse it), and reports connect's
// result.
func connectUnix(path string) string {
	c, err := net.DialTimeout("unix", path, 2*time.Second)
	if err != nil {
		return errOf(err)
	}
	c.SetDeadline(time.Now().Add(time.Second))
	c.Write([]byte("\x00\x00\x00\x05\x01\x00\x00\x00\x00probe"))
	io.Copy(io.Discard, io.LimitReader(c, 4096))
	c.Close()
	return "0"
}

// procFiles are the files of /proc/PID that hold something of the process
// (memory, environment, descriptors, what it is doing), each opened and
// read; mem is read at an address of a mapping when maps is readable.
var procFiles = []string{"environ", "maps", "smaps", "auxv", "mem", "pagemap", "syscall", "io", "cwd", "root", "exe"}

// procProbes reads the /proc files of pid and tries the calls that reach
// into another process.
func procProbes(label string, pid int) {
	report := func(what, res string) { fmt.Printf("%s:%s=%s\n", label, what, res) }
	base := "/proc/" + strconv.Itoa(pid)
	addr := int64(0x400000)
	if b, err := os.ReadFile(base + "/maps"); err == nil {
		if f := strings.Fields(string(b)); len(f) > 0 {
			if lo, _, ok := strings.Cut(f[0], "-"); ok {
				if n, err := strconv.ParseInt(lo, 16, 64); err == nil {
					addr = n
				}
			}
		}
	}
	for _, name := range procFiles {
		report(name, readProc(base+"/"+name, name == "mem", addr))
	}
	// The descriptors: listed, or blindly tried when the listing is
	// refused.
	fds := []string{}
	ents, err := os.ReadDir(base + "/fd")
	report("readdir_fd", errOf(err))
	if err == nil {
		for _, e := range ents {
			fds = append(fds, e.Name())
		}
	} else {
		for i := 0; i < 16; i++ {
			fds = append(fds, strconv.Itoa(i))
		}
	}
	for _, fd := range fds {
		p := base + "/fd/" + fd
		target, lerr := os.Readlink(p)
		if lerr == nil {
			report("readlink_fd"+fd, "0 "+strings.ReplaceAll(target, " ", "_"))
		} else if !os.IsNotExist(lerr) {
			report("readlink_fd"+fd, errOf(lerr))
		}
		res := "ENOENT"
		for _, flag := range []int{os.O_RDONLY, os.O_WRONLY} {
			f, err := os.OpenFile(p, flag|syscall.O_NONBLOCK, 0)
			if err == nil {
				res = "0 " + describe(f)
				f.Close()
				break
			}
			if res == "ENOENT" || !os.IsNotExist(err) {
				res = errOf(err)
			}
		}
		if res != "ENOENT" || lerr == nil {
			report("open_fd"+fd, res)
		}
	}
	if fd, err := unix.Open(base+"/fdinfo/0", unix.O_RDONLY|unix.O_CLOEXEC, 0); err == nil {
		unix.Close(fd)
		report("fdinfo", "0")
	} else {
		report("fdinfo", errOf(err))
	}

	report("ptrace_attach", ptraceAttach(pid))
	_, _, e := unix.RawSyscall6(unix.SYS_PTRACE, unix.PTRACE_SEIZE, uintptr(pid), 0, 0, 0, 0)
	if e == 0 {
		unix.RawSyscall6(unix.SYS_PTRACE, unix.PTRACE_DETACH, uintptr(pid), 0, 0, 0, 0)
	}
	report("ptrace_seize", errName(e))
	buf := make([]byte, 16)
	local := unix.Iovec{Base: &buf[0], Len: 16}
	remote := unix.RemoteIovec{Base: uintptr(addr), Len: 16}
	_, _, e = unix.Syscall6(unix.SYS_PROCESS_VM_READV, uintptr(pid), uintptr(unsafe.Pointer(&local)), 1, uintptr(unsafe.Pointer(&remote)), 1, 0)
	report("process_vm_readv", errName(e))
	report("pidfd_getfd", pidfdGetfd(pid))
}

// readProc opens and reads a /proc file (or lists a directory, or reads
// through a link); mem is read at addr.
func readProc(p string, mem bool, addr int64) string {
	f, err := os.Open(p)
	if err != nil {
		return "open_" + errOf(err)
	}
	defer f.Close()
	if fi, err := f.Stat(); err == nil && fi.IsDir() {
		if _, err := f.Readdirnames(1); err != nil && err != io.EOF {
			return "readdir_" + errOf(err)
		}
		return "0"
	}
	buf := make([]byte, 4096)
	var n int
	if mem {
		n, err = f.ReadAt(buf[:16], addr)
	} else {
		n, err = f.Read(buf)
	}
	if err != nil && (err != io.EOF || mem && n == 0) {
		return "read_" + errOf(err)
	}
	return "0"
}

// describe says what an opened file is: its type and permission bits.
func describe(f *os.File) string {
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		return "?"
	}
	kind := map[uint32]string{unix.S_IFCHR: "chr", unix.S_IFBLK: "blk", unix.S_IFIFO: "fifo", unix.S_IFSOCK: "sock",
		unix.S_IFREG: "file", unix.S_IFDIR: "dir"}[st.Mode&unix.S_IFMT]
	if kind == "" {
		kind = "other"
	}
	return fmt.Sprintf("%s %04o", kind, st.Mode&0o7777)
}

func rawKill(pid int, sig syscall.Signal) syscall.Errno {
	_, _, e := unix.RawSyscall(unix.SYS_KILL, uintptr(pid), uintptr(sig), 0)
	return e
}

// pidfdSignal sends sig through a pidfd made by opening /proc/PID: the
// route a filter on kill's pid argument does not see.
func pidfdSignal(pid int, sig syscall.Signal) string {
	dfd, err := unix.Open("/proc/"+strconv.Itoa(pid), unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return "open_" + errOf(err)
	}
	defer unix.Close(dfd)
	_, _, e := unix.RawSyscall6(unix.SYS_PIDFD_SEND_SIGNAL, uintptr(dfd), uintptr(sig), 0, 0, 0, 0)
	return errName(e)
}
