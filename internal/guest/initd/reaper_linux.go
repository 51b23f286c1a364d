package initd

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/internal/guest"
	"github.com/agentbox/agentbox/internal/seccomp"
)

// ReaperArg is the first argument that makes the guest binary a reaper.
const ReaperArg = "reaper"

// ctlFD is the reaper's end of its control socket with the guest.
const ctlFD = 3

// defaultPath is where a command is looked up when its environment has no
// PATH (the environment itself stays as given).
const defaultPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// RunReaper is the main function of a reaper. The guest starts it with its
// control socket as fd 3. For each command the guest sends one FrameOpen
// carrying the command's stdin, stdout and stderr as SCM_RIGHTS, on a
// stream id of its own (so that a late kill never hits the next command).
// The reaper answers FrameStarted or FrameError, obeys FrameSignal and
// FrameKill, and sends FrameExit once the command and everything it left
// behind are dead and reaped; then it waits for the next command. If the
// guest goes away, the reaper kills the tree and exits.
func RunReaper(args []string) int {
	// A handler (not SIG_IGN, which the command would inherit) so that a
	// stray signal from the sandbox does not end the reaper.
	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP, syscall.SIGQUIT,
		syscall.SIGUSR1, syscall.SIGUSR2, syscall.SIGTSTP, syscall.SIGTTIN, syscall.SIGTTOU)
	go func() {
		for range sigs {
		}
	}()
	syscall.CloseOnExec(ctlFD)
	// Nothing but the three descriptors of each command reaches it, even
	// if the guest (or what started it) leaked one to this process.
	closeOnExecAbove(ctlFD)
	// Opened while the reaper is still dumpable: once it is not, its /proc
	// files belong to root and this user could not open them (see
	// setOOMScore). Close-on-exec, like every file Go opens.
	oomScoreAdj, _ = os.OpenFile("/proc/self/oom_score_adj", os.O_WRONLY, 0)
	// On the main thread, which stays locked: commands are forked from it
	// and inherit its seccomp filter. Without a subreaper (refused, or
	// turned off by guest.SubreaperEnv), orphans go to the guest, which
	// then sweeps them itself (see Guest.sweepOrphans).
	unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0)
	if subreapersOn() {
		unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
	}
	// A session of its own, for its commands' process groups (see
	// startCommand). A reaper cannot fail to get one (it leads no group),
	// and one that did would still run commands, in the guest's session.
	syscall.Setsid()
	// The same filter as the local jail's, with the guest protected: the
	// commands of every backend get the same refusals (see package
	// seccomp). A reaper that cannot install it runs no command.
	var refuse string
	if f, err := seccomp.Build(seccomp.Options{Protect: []int{os.Getppid()}}); err != nil {
		refuse = "reaper: " + err.Error()
	} else if err := f.InstallThread(); err != nil {
		refuse = "reaper: " + err.Error()
	}
	r := &reaperState{
		self:   os.Getpid(),
		w:      guest.NewFrameWriter(os.NewFile(ctlFD, "ctl"), 0),
		cr:     &ctlReader{fd: ctlFD},
		refuse: refuse,
	}
	// Landlock too goes on the main thread, for the commands to inherit.
	// The reaper's own needs (reading /proc, signalling its own tree) fit
	// within the commands' ruleset.
	if r.refuse != "" {
		// Already refusing: no command runs without the filter.
	} else if l, err := parseReaperArgs(args); err != nil {
		r.refuse = fmt.Sprintf("reaper: %v", err)
	} else if st, err := restrictThread(l); err != nil && l.Mode == guest.LandlockRequired {
		// Best effort is the guest's to report: it probed the same.
		r.refuse = "landlock is required but cannot be enforced: " + st.Detail
	}
	opens := make(chan guest.Frame)
	go r.readControl(opens)
	for f := range opens { // on the main thread: see above
		r.runOne(f)
	}
	return 0
}

// reaperState is a reaper between and during commands.
type reaperState struct {
	self int
	w    *guest.FrameWriter
	cr   *ctlReader
	// refuse, when set, is why this reaper runs no command.
	refuse string

	mu     sync.Mutex
	id     uint32 // the current command's stream id; 0 between commands
	cpid   int    // its pid until it is reaped
	reaped bool
}

// readControl passes FrameOpen to the main loop and carries out signals
// and kills for the current command at once.
func (r *reaperState) readControl(opens chan<- guest.Frame) {
	defer close(opens)
	br := bufio.NewReader(r.cr)
	for {
		f, err := guest.ReadFrame(br)
		if err != nil {
			// The guest is gone: nobody will ever read a result.
			killTree(r.self, nil)
			return
		}
		if f.Type == guest.FrameOpen {
			opens <- f
			continue
		}
		sig, err := guest.DecodeSignal(f.Payload)
		if err != nil {
			continue
		}
		r.mu.Lock()
		current := f.Stream == r.id && r.id != 0
		cpid, reaped := r.cpid, r.reaped
		r.mu.Unlock()
		if !current {
			continue // for a command that already ended
		}
		switch f.Type {
		case guest.FrameSignal:
			if !reaped {
				if syscall.Kill(-cpid, syscall.Signal(sig)) != nil {
					syscall.Kill(cpid, syscall.Signal(sig))
				}
			}
		case guest.FrameKill:
			if syscall.Signal(sig) == syscall.SIGKILL {
				killTree(r.self, nil)
			} else {
				signalTree(r.self, syscall.Signal(sig))
			}
		}
	}
}

// runOne runs one command to the end of its whole tree.
func (r *reaperState) runOne(f guest.Frame) {
	id := f.Stream
	fds := r.cr.takeFDs()
	defer func() {
		for _, fd := range fds {
			syscall.Close(fd)
		}
	}()
	fail := func(kind guest.ErrorKind, format string, args ...any) {
		r.w.WriteFrame(guest.FrameError, id, guest.EncodeError(kind, fmt.Sprintf(format, args...)))
	}
	req, err := guest.DecodeExecRequest(f.Payload)
	if err != nil {
		fail(guest.ErrKindInvalid, "%v", err)
		return
	}
	if len(fds) != 3 {
		fail(guest.ErrKindInternal, "reaper: got %d file descriptors, want 3", len(fds))
		return
	}
	if r.refuse != "" {
		fail(guest.ErrKindStart, "%s", r.refuse)
		return
	}
	r.mu.Lock() // held across the fork so that no signal misses the new pid
	cpid, err := startCommand(&req, fds)
	if err == nil {
		r.id, r.cpid, r.reaped = id, cpid, false
	}
	r.mu.Unlock()
	if err != nil {
		var se *guest.StartError
		if errors.As(err, &se) {
			fail(se.Kind, "%s", se.Reason)
		} else {
			fail(guest.ErrKindStart, "%v", err)
		}
		return
	}
	// The command has its copies; holding ours would keep its pipes open.
	for _, fd := range fds {
		syscall.Close(fd)
	}
	fds = nil
	if err := r.w.WriteFrame(guest.FrameStarted, id, guest.EncodeU32(uint32(cpid))); err != nil {
		killTree(r.self, nil)
	}

	var status syscall.WaitStatus
	var use usage
	for {
		pid, err := waitExited()
		if err == syscall.EINTR {
			continue
		}
		if err != nil {
			break // ECHILD: nothing of the command's is left
		}
		if pid == cpid {
			// The command's group dies before the command is reaped:
			// without the command it has no link to the session (orphans
			// go to PID 1 under gVisor), and gVisor would continue its
			// stopped members with SIGHUP and SIGCONT at the reap. Until
			// then no other group can take the command's pid as its id.
			syscall.Kill(-cpid, syscall.SIGKILL)
		}
		var ws syscall.WaitStatus
		var ru syscall.Rusage
		if err := reap(pid, &ws, &ru); err != nil {
			break // not a child after all: nothing is left to wait for
		}
		use.add(&ru)
		if pid != cpid {
			continue
		}
		r.mu.Lock()
		r.reaped = true
		r.mu.Unlock()
		status = ws
		// What the command left behind dies with it. No child at all
		// means no descendant: orphans are reparented to this reaper.
		pid, err = syscall.Wait4(-1, &ws, syscall.WNOHANG, &ru)
		if err == syscall.ECHILD {
			break
		}
		if err == nil && pid > 0 {
			use.add(&ru)
		}
		killTree(r.self, nil)
	}
	r.mu.Lock()
	r.id = 0
	r.mu.Unlock()
	code, sig := exitStatus(status)
	r.w.WriteFrame(guest.FrameExit, id, guest.EncodeExit(guest.ExecResult{ExitCode: code, Signal: sig,
		UserCPU: use.user, SysCPU: use.sys, PeakMemBytes: use.peak}))
}

// waitExited waits until a child of the reaper has exited and returns its
// pid, leaving it a zombie (waitid with WNOWAIT): the reaper may act on its
// exit before anything that the reap sets off.
func waitExited() (int, error) {
	var si siginfoChild
	_, _, e := syscall.Syscall6(syscall.SYS_WAITID, unix.P_ALL, 0, uintptr(unsafe.Pointer(&si)), unix.WEXITED|unix.WNOWAIT, 0, 0)
	if e != 0 {
		return 0, e
	}
	return int(si.pid), nil
}

// siginfoChild is a siginfo_t (128 bytes) as waitid fills it for a child.
type siginfoChild struct {
	_   [4]int32 // si_signo, si_errno, si_code, padding
	pid int32
	_   [108]byte
}

// reap reaps the child pid, which has exited.
func reap(pid int, ws *syscall.WaitStatus, ru *syscall.Rusage) error {
	for {
		_, err := syscall.Wait4(pid, ws, 0, ru)
		if err != syscall.EINTR {
			return err
		}
	}
}

// usage sums what wait4 reports for each process of one command's tree.
// A process's report covers the process and every descendant it waited
// for, so the reports of the processes the reaper waits for (the command
// and its orphans) add up to the whole tree, each process counted once.
type usage struct {
	user, sys time.Duration
	// peak is the largest resident set of a single process, in bytes.
	peak int64
}

func (u *usage) add(ru *syscall.Rusage) {
	u.user += time.Duration(ru.Utime.Nano())
	u.sys += time.Duration(ru.Stime.Nano())
	u.peak = max(u.peak, int64(ru.Maxrss)*1024) // Linux reports KiB
}

// exitStatus is the shell's view of a wait status.
func exitStatus(ws syscall.WaitStatus) (code, sig int) {
	if ws.Signaled() {
		return 128 + int(ws.Signal()), int(ws.Signal())
	}
	return ws.ExitStatus(), 0
}

// startCommand checks what a shell would check and starts the command in
// a process group of its own in the reaper's session; on a TTY the reaper
// takes the terminal as its session's and puts the command's group in the
// foreground.
//
// That layout is the one job control needs on every runtime. The command's
// group has a link to its session (the command's parent, the reaper, in
// another group of the same session) as long as the command runs, so the
// group is never orphaned and its stopped members are never sent SIGHUP
// and SIGCONT. gVisor needs exactly this: it checks for orphans whenever a
// member of a group is reaped (Linux only when a group becomes orphaned),
// and it does not recount a process whose parent dies. A command leading a
// session of its own would have no link at all. One in the guest's session
// would lose its link on gVisor as soon as an orphan of its own is reaped:
// the orphan went to PID 1, in another group of the same session, and its
// reap takes away a link that it never was. PID 1 is outside the reaper's
// session, so there orphans never count.
func startCommand(req *guest.ExecRequest, fds []int) (int, error) {
	argv0 := req.Argv[0]
	dir := req.Workdir()
	if fi, err := os.Stat(dir); err != nil {
		return 0, &guest.StartError{Argv0: argv0, Kind: guest.ErrKindStart, Reason: fmt.Sprintf("working directory: %v", err)}
	} else if !fi.IsDir() {
		return 0, &guest.StartError{Argv0: argv0, Kind: guest.ErrKindStart, Reason: fmt.Sprintf("working directory %s is not a directory", dir)}
	}
	path, err := lookPath(argv0, dir, req.Env)
	if err != nil {
		return 0, err
	}
	sys := &syscall.SysProcAttr{Setpgid: true}
	if req.TTY {
		// A reaper that serves a terminal is not used again (the guest's
		// call): it would keep it as its session's.
		if unix.IoctlSetInt(fds[0], unix.TIOCSCTTY, 0) == nil {
			sys = &syscall.SysProcAttr{Foreground: true, Ctty: fds[0]}
		} else {
			// Not a session leader, or one with a terminal already: the
			// command leads a session of its own, as a login shell does.
			sys = &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0}
		}
	}
	env := req.Env
	if env == nil {
		env = []string{}
	}
	makeHome(env)
	// The command and everything it starts are the OOM killer's first
	// choice in the sandbox's memory cgroup, never the guest or a reaper:
	// a memory-hungry fork bomb must not take the sandbox with it. The
	// child inherits the reaper's score at fork; raising it needs no
	// privilege, and lowering it back to 0 (its floor) neither.
	setOOMScore("1000")
	pid, err := syscall.ForkExec(path, req.Argv, &syscall.ProcAttr{
		Dir:   dir,
		Env:   env,
		Files: []uintptr{uintptr(fds[0]), uintptr(fds[1]), uintptr(fds[2])},
		Sys:   sys,
	})
	setOOMScore("0")
	if err != nil {
		kind := guest.ErrKindStart
		if err == syscall.ENOENT {
			kind = guest.ErrKindNotFound
		}
		return 0, &guest.StartError{Argv0: argv0, Kind: kind, Reason: err.Error()}
	}
	return pid, nil
}

// oomScoreAdj is this reaper's /proc/self/oom_score_adj, open for writing;
// nil where /proc does not offer it.
var oomScoreAdj *os.File

// setOOMScore sets this reaper's oom_score_adj; where it cannot, commands
// keep the reaper's score.
func setOOMScore(v string) {
	if oomScoreAdj != nil {
		oomScoreAdj.WriteAt([]byte(v), 0)
	}
}

// lookPath finds file the way execvp does, in the PATH of env.
func lookPath(file, dir string, env []string) (string, error) {
	notFound := &guest.StartError{Argv0: file, Kind: guest.ErrKindNotFound, Reason: "executable file not found in $PATH"}
	if strings.Contains(file, "/") {
		p := file
		if !filepath.IsAbs(p) {
			p = filepath.Join(dir, p)
		}
		if err := checkExecutable(p); err != nil {
			kind := guest.ErrKindStart
			if errors.Is(err, os.ErrNotExist) {
				kind = guest.ErrKindNotFound
			}
			return "", &guest.StartError{Argv0: file, Kind: kind, Reason: err.Error()}
		}
		return p, nil
	}
	path := defaultPath
	for _, e := range env {
		if v, found := strings.CutPrefix(e, "PATH="); found {
			path = v
		}
	}
	for _, d := range filepath.SplitList(path) {
		if d == "" {
			d = "."
		}
		p := filepath.Join(d, file)
		if !filepath.IsAbs(p) {
			p = filepath.Join(dir, p)
		}
		if checkExecutable(p) == nil {
			return p, nil
		}
	}
	return "", notFound
}

func checkExecutable(p string) error {
	fi, err := os.Stat(p)
	if err != nil {
		return err
	}
	if fi.IsDir() {
		return fmt.Errorf("%s is a directory", p)
	}
	if err := unix.Access(p, unix.X_OK); err != nil {
		return fmt.Errorf("%s: %w", p, err)
	}
	return nil
}

// ctlReader reads the reaper's control socket, keeping the file
// descriptors that arrive with the data.
type ctlReader struct {
	fd  int
	mu  sync.Mutex
	fds []int
}

func (c *ctlReader) Read(p []byte) (int, error) {
	oob := make([]byte, syscall.CmsgSpace(8*4))
	for {
		n, oobn, _, _, err := syscall.Recvmsg(c.fd, p, oob, unix.MSG_CMSG_CLOEXEC)
		if err == syscall.EINTR {
			continue
		}
		if err != nil {
			return 0, err
		}
		if oobn > 0 {
			msgs, err := syscall.ParseSocketControlMessage(oob[:oobn])
			if err == nil {
				for i := range msgs {
					if fds, err := syscall.ParseUnixRights(&msgs[i]); err == nil {
						c.mu.Lock()
						c.fds = append(c.fds, fds...)
						c.mu.Unlock()
					}
				}
			}
		}
		if n == 0 {
			return 0, io.EOF
		}
		return n, nil
	}
}

func (c *ctlReader) takeFDs() []int {
	c.mu.Lock()
	defer c.mu.Unlock()
	fds := c.fds
	c.fds = nil
	return fds
}

// closeOnExecAbove marks every descriptor above fd close-on-exec.
func closeOnExecAbove(fd int) {
	if unix.CloseRange(uint(fd+1), ^uint(0), unix.CLOSE_RANGE_CLOEXEC) == nil {
		return
	}
	// Kernels before 5.11 and gVisor 2022 lack the flag: walk the table.
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return
	}
	for _, e := range ents {
		if n, err := strconv.Atoi(e.Name()); err == nil && n > fd {
			syscall.CloseOnExec(n)
		}
	}
}

// makeHome makes the command's HOME when it names a missing directory
// under /tmp (sandbox.DefaultHome, which the daemon gives commands whose
// image sets no HOME), owned by the sandbox user: tools write ~/.cache,
// ~/.npm and ~/.gitconfig there. Anything else is left as it is.
func makeHome(env []string) {
	home := ""
	for _, e := range env {
		if v, ok := strings.CutPrefix(e, "HOME="); ok {
			home = v
		}
	}
	if home == "" || !strings.HasPrefix(filepath.Clean(home), "/tmp/") {
		return
	}
	os.MkdirAll(filepath.Clean(home), 0o700)
}
