package initd

import (
	"bufio"
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"runtime"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/internal/guest"
)

// Config is how the guest was started.
type Config struct {
	// SocketPath is the daemon's socket inside the sandbox.
	SocketPath string
	// Token authenticates the guest to the daemon.
	Token string
	// Version is the guest's build version, sent in its hello.
	Version string
	// Logger receives the guest's few log lines.
	Logger *slog.Logger
	// Landlock is the Landlock policy of the commands.
	Landlock Landlock
	// Egress, when set, is the relay of the sandbox's proxy traffic.
	Egress *Egress
	// Commands, when set, is the user commands run as, apart from the
	// guest's own (see BecomeGuest); unset, they run as the guest.
	Commands *User
}

const (
	// dialTimeout bounds one connection attempt with its handshake.
	dialTimeout = 5 * time.Second
	// writeTimeout bounds each frame write to the daemon.
	writeTimeout = 10 * time.Second
	// backoff bounds between connection attempts. The guest never gives up:
	// whether a sandbox that lost its daemon lives on is the daemon's call.
	minBackoff = 10 * time.Millisecond
	maxBackoff = time.Second
)

// Guest is the running init.
type Guest struct {
	cfg  Config
	log  *slog.Logger
	exe  string
	self int

	// mu guards reapers. It is held across fork+register, so the reap loop
	// never sees a reaper it does not know, and across sweeps, so a sweep
	// never mistakes a new reaper for a stray.
	mu      sync.Mutex
	reapers map[int]*reaper

	// reaperArgv is how a reaper is started, and cred as whom (nil: as
	// the guest).
	reaperArgv []string
	cred       *syscall.Credential
	// commands is the user commands run as, nil for the guest's own.
	commands *User
	// poolMu guards idle and warming.
	poolMu sync.Mutex
	idle   []*reaper // idle reapers, ready for a command
	// warming, while a reaper for the pool is being started, is closed
	// once it is idle (or failed).
	warming chan struct{}
	devnull *os.File

	// landlock is what the commands run under; refuse, when set, is why
	// the guest runs no command at all (Landlock required and missing).
	landlock guest.LandlockStatus
	refuse   string

	// sweepOrphans says orphans of commands may come to the guest: reapers
	// cannot be subreapers, or the guest is PID 1 of a runtime that may
	// ignore them (gVisor 20221219 accepts PR_SET_CHILD_SUBREAPER and still
	// reparents orphans to PID 1). The guest cannot tell whose they are, so
	// the last command to end kills them all.
	sweepOrphans bool
	// execMu guards running, the number of commands running.
	execMu  sync.Mutex
	running int
}

// gvisorVersion is the kernel version string every gVisor release reports
// (uname -v), the 2022 one and the current one alike.
const gvisorVersion = "#1 SMP Sun Jan 10 15:06:54 PST 2016"

// subreapersKeepOrphans says the orphans of a command stay under its
// reaper, so that none can come to a guest that is PID 1 unless a reaper
// dies (which the guest sweeps after on its own): on Linux, where a child
// subreaper gets them, when reapers are made subreapers (guest.SubreaperEnv).
// Not under gVisor: its 2022 release accepted PR_SET_CHILD_SUBREAPER and
// still gave orphans to PID 1, and its gvisor backend turns subreapers off.
// Where it says no, the guest scans the process table after each command
// (Guest.sweepOrphans): a tenth of an exec's round trip under runc.
func subreapersKeepOrphans() bool {
	var u unix.Utsname
	if err := unix.Uname(&u); err != nil {
		return false
	}
	return keepsOrphans(subreapersOn(), unix.ByteSliceToString(u.Version[:]))
}

// keepsOrphans is subreapersKeepOrphans for whether reapers are made
// subreapers and the kernel's version string.
func keepsOrphans(subreapers bool, kernelVersion string) bool {
	return subreapers && kernelVersion != gvisorVersion
}

// subreapersOn says reapers make themselves child subreapers: unless
// guest.SubreaperEnv is "0".
func subreapersOn() bool { return os.Getenv(guest.SubreaperEnv) != "0" }

// maxIdleReapers bounds the reapers kept for reuse.
const maxIdleReapers = 2

// Run runs the guest until ctx ends or SIGTERM arrives; then it kills every
// process it started and returns.
func Run(ctx context.Context, cfg Config) error {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	self := os.Getpid()
	// Under a runtime whose own init is PID 1 (bubblewrap), orphans of a
	// killed reaper come here instead of escaping. As PID 1 it is a no-op
	// that tells whether reapers can be subreapers.
	subreapers := true
	if err := setupProcess(); err != nil {
		if self != 1 {
			return err
		}
		subreapers = false
		cfg.Logger.Warn("reapers cannot be subreapers: orphans of commands are killed when no command runs", "error", err)
	}
	exe, err := os.Executable()
	if err != nil {
		return fmt.Errorf("finding the guest binary: %w", err)
	}
	devnull, err := os.Open(os.DevNull)
	if err != nil {
		return err
	}
	defer devnull.Close()
	g := &Guest{
		cfg:          cfg,
		log:          cfg.Logger,
		exe:          exe,
		self:         self,
		reapers:      make(map[int]*reaper),
		reaperArgv:   reaperArgv(cfg.Landlock),
		cred:         credential(cfg.Commands),
		commands:     cfg.Commands,
		devnull:      devnull,
		sweepOrphans: self == 1 && !(subreapers && subreapersKeepOrphans()),
	}
	// The reaper TakeToken started before the guest re-executed itself
	// is known before anything is reaped.
	if r, err := g.adoptReaper(); err != nil {
		g.log.Warn("adopting the first reaper", "error", err)
	} else if r != nil {
		g.idle = append(g.idle, r)
	}

	sigchld := make(chan os.Signal, 1)
	signal.Notify(sigchld, syscall.SIGCHLD)
	sigchld <- syscall.SIGCHLD // whatever died before Notify
	go g.reapLoop(sigchld)
	// As PID 1 only signals with a handler are delivered from inside the
	// sandbox. A handler that drops them (never SIG_IGN, which commands
	// would inherit) keeps the sandbox's processes from ending the guest
	// with a stray SIGINT or SIGHUP. SIGTERM ends it: that is how runtimes
	// stop a sandbox.
	stray := make(chan os.Signal, 8)
	signal.Notify(stray, syscall.SIGINT, syscall.SIGHUP, syscall.SIGQUIT, syscall.SIGUSR1,
		syscall.SIGUSR2, syscall.SIGPIPE, syscall.SIGTSTP, syscall.SIGTTIN, syscall.SIGTTOU)
	go func() {
		for range stray {
		}
	}()
	ctx, stop := signal.NotifyContext(ctx, syscall.SIGTERM)
	defer stop()

	go g.refill()
	if n := prewarmCount(); n > 0 {
		go prewarmThreads(n)
	}
	// The hello says what the commands run under, so this comes before
	// the first connection; it costs a thread and a few system calls.
	g.landlock = probeLandlock(cfg.Landlock)
	if cfg.Landlock.Mode == guest.LandlockRequired && !g.landlock.Enforced {
		g.refuse = "landlock is required but cannot be enforced: " + g.landlock.Detail
		g.log.Error("refusing every command", "reason", g.refuse)
	} else if cfg.Landlock.Mode != guest.LandlockOff && !g.landlock.Enforced {
		g.log.Warn("commands run without Landlock", "reason", g.landlock.Detail)
	}
	// The proxy listens before the daemon can send a first command.
	if cfg.Egress != nil {
		if ln, err := cfg.Egress.Listener(); err != nil {
			g.log.Error("commands have no egress proxy", "error", err)
		} else {
			go func() {
				if err := cfg.Egress.Serve(ctx, ln); err != nil {
					g.log.Error("egress proxy stopped", "error", err)
				}
			}()
		}
	}
	// A connection whose commands are stuck must not delay a shutdown:
	// the loop runs apart, and the process ends with Run.
	go g.connectLoop(ctx)
	<-ctx.Done()
	g.log.Info("shutting down: killing every process")
	g.shutdown()
	return nil
}

// setupProcess makes the guest non-dumpable, so that commands (the same
// user) cannot ptrace it or read its memory, and a child subreaper. It
// must run on the main thread (see thread_linux.go).
func setupProcess() error {
	defer runtime.UnlockOSThread()
	if err := unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0); err != nil {
		return fmt.Errorf("PR_SET_DUMPABLE: %w", err)
	}
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("PR_SET_CHILD_SUBREAPER: %w", err)
	}
	return nil
}

// connectLoop dials the daemon, serves the connection, and dials again
// when it drops, until ctx ends.
func (g *Guest) connectLoop(ctx context.Context) {
	backoff := minBackoff
	for ctx.Err() == nil {
		nc, br, err := g.dial(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			g.log.Debug("connecting to the daemon", "socket", g.cfg.SocketPath, "error", err)
			select {
			case <-ctx.Done():
				return
			case <-time.After(backoff):
			}
			backoff = min(2*backoff, maxBackoff)
			continue
		}
		backoff = minBackoff
		g.log.Info("connected to the daemon", "socket", g.cfg.SocketPath)
		s := newSession(g, nc)
		err = s.serve(ctx, br)
		g.log.Info("connection to the daemon ended", "error", err)
	}
}

// dial connects and authenticates.
func (g *Guest) dial(ctx context.Context) (net.Conn, *bufio.Reader, error) {
	d := net.Dialer{Timeout: dialTimeout}
	nc, err := d.DialContext(ctx, "unix", g.cfg.SocketPath)
	if err != nil {
		return nil, nil, err
	}
	nc.SetDeadline(time.Now().Add(dialTimeout))
	hello := guest.Hello{Version: guest.ProtocolVersion, Token: []byte(g.cfg.Token), GuestVersion: g.cfg.Version, Pid: uint32(g.self), Landlock: g.landlock}
	if _, err := nc.Write(guest.AppendFrame(nil, guest.FrameHello, 0, hello.Encode())); err != nil {
		nc.Close()
		return nil, nil, fmt.Errorf("sending hello: %w", err)
	}
	br := bufio.NewReaderSize(nc, 64<<10)
	f, err := guest.ReadFrame(br)
	if err != nil {
		nc.Close()
		return nil, nil, fmt.Errorf("reading the daemon's answer: %w", err)
	}
	switch f.Type {
	case guest.FrameHelloOK:
	case guest.FrameError:
		nc.Close()
		_, msg, _ := guest.DecodeError(f.Payload)
		return nil, nil, fmt.Errorf("daemon refused the guest: %s", msg)
	default:
		nc.Close()
		return nil, nil, fmt.Errorf("%w: daemon answered %s", guest.ErrProtocol, f.Type)
	}
	nc.SetDeadline(time.Time{})
	return nc, br, nil
}

// shutdown kills every process below the guest and reaps them.
func (g *Guest) shutdown() {
	g.mu.Lock()
	err := killTree(g.self, nil)
	g.mu.Unlock()
	if err != nil {
		g.log.Error("killing everything at shutdown", "error", err)
	}
	deadline := time.Now().Add(2 * time.Second)
	for time.Now().Before(deadline) {
		var ws syscall.WaitStatus
		if _, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil); err == syscall.ECHILD {
			return
		}
		time.Sleep(time.Millisecond)
	}
}

// reapLoop reaps every child of the guest: its reapers, and as PID 1 (or
// subreaper) every orphan of the sandbox.
func (g *Guest) reapLoop(sigchld <-chan os.Signal) {
	for range sigchld {
		for {
			var ws syscall.WaitStatus
			pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil)
			if err == syscall.EINTR {
				continue
			}
			if pid <= 0 || err != nil {
				break
			}
			g.mu.Lock()
			r := g.reapers[pid]
			delete(g.reapers, pid)
			g.mu.Unlock()
			if r != nil {
				r.exited <- ws
			}
		}
	}
}

// sweepStrays kills every process below the guest that is not in the
// subtree of a live reaper: the orphans of a reaper that was killed.
func (g *Guest) sweepStrays() {
	g.mu.Lock()
	defer g.mu.Unlock()
	err := killTree(g.self, func(pid int) bool { return g.reapers[pid] != nil })
	if err != nil {
		g.log.Error("killing stray processes", "error", err)
	}
}

// reaper is the guest's handle on one reaper process. A reaper serves one
// command at a time and is reused once a command's tree is gone.
type reaper struct {
	pid    int
	ctl    *net.UnixConn
	w      *guest.FrameWriter
	msgs   chan guest.Frame        // frames from the reaper; closed at EOF
	exited chan syscall.WaitStatus // its wait status, from reapLoop
	seq    uint32                  // stream id of its current command
}

// reaperArgv is the command line of a reaper with policy l.
func reaperArgv(l Landlock) []string {
	return append([]string{"agentbox-guest", ReaperArg}, l.reaperArgs()...)
}

// forkReaper starts a reaper: the guest binary at exe with argv, its
// control socket as fd 3, as cred (nil: as the guest). It returns the
// guest's end of the socket, close-on-exec.
func forkReaper(exe string, argv []string, devnull uintptr, cred *syscall.Credential) (pid, ctl int, err error) {
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		return 0, 0, fmt.Errorf("reaper control socket: %w", err)
	}
	env := []string{"GOMAXPROCS=1"}
	if v, ok := os.LookupEnv(guest.SubreaperEnv); ok {
		env = append(env, guest.SubreaperEnv+"="+v)
	}
	pid, err = syscall.ForkExec(exe, argv, &syscall.ProcAttr{
		Dir:   "/",
		Env:   env,
		Files: []uintptr{devnull, devnull, 2, uintptr(fds[1])},
		Sys:   &syscall.SysProcAttr{Credential: cred},
	})
	syscall.Close(fds[1])
	if err != nil {
		syscall.Close(fds[0])
		return 0, 0, fmt.Errorf("starting a reaper: %w", err)
	}
	return pid, fds[0], nil
}

// spawnReaper starts an idle reaper.
func (g *Guest) spawnReaper() (*reaper, error) {
	// Held across fork and register, so that reapLoop knows the pid.
	g.mu.Lock()
	pid, ctl, err := forkReaper(g.exe, g.reaperArgv, g.devnull.Fd(), g.cred)
	if err != nil {
		g.mu.Unlock()
		return nil, err
	}
	r := g.registerReaper(pid)
	g.mu.Unlock()
	if err := r.attach(ctl); err != nil {
		syscall.Kill(pid, syscall.SIGKILL)
		return nil, err
	}
	return r, nil
}

// registerReaper makes a reaper known to reapLoop; g.mu must be held.
func (g *Guest) registerReaper(pid int) *reaper {
	r := &reaper{pid: pid, msgs: make(chan guest.Frame, 16), exited: make(chan syscall.WaitStatus, 1)}
	g.reapers[pid] = r
	return r
}

// attach starts reading the reaper's control socket ctl.
func (r *reaper) attach(ctl int) error {
	syscall.SetNonblock(ctl, true)
	f := os.NewFile(uintptr(ctl), "reaper-ctl")
	nc, err := net.FileConn(f)
	f.Close()
	if err != nil {
		return fmt.Errorf("reaper control socket: %w", err)
	}
	r.ctl = nc.(*net.UnixConn)
	r.w = guest.NewFrameWriter(r.ctl, 2*time.Second)
	go func() {
		br := bufio.NewReader(r.ctl)
		defer close(r.msgs)
		for {
			f, err := guest.ReadFrame(br)
			if err != nil {
				return
			}
			select {
			case r.msgs <- f:
			default: // a reaper sends at most two frames per command
			}
		}
	}()
	return nil
}

// refill keeps an idle reaper ready: it starts one unless one is idle or
// being started.
func (g *Guest) refill() {
	g.poolMu.Lock()
	if len(g.idle) > 0 || g.warming != nil {
		g.poolMu.Unlock()
		return
	}
	done := make(chan struct{})
	g.warming = done
	g.poolMu.Unlock()

	r, err := g.spawnReaper()
	g.poolMu.Lock()
	g.warming = nil
	if err == nil && len(g.idle) < maxIdleReapers {
		g.idle = append(g.idle, r)
		r = nil
	}
	g.poolMu.Unlock()
	close(done)
	if err != nil {
		g.log.Warn("starting an idle reaper", "error", err)
	} else if r != nil {
		r.ctl.Close() // it exits at EOF
	}
}

// takeReaper returns a live idle reaper. When none is idle but one is
// being started, it waits for that one: it started earlier than a new one
// would (the first command of a sandbox finds the reaper that started
// with the guest). The caller refills the pool once its command runs, so
// that the next reaper's start does not compete with this command's.
func (g *Guest) takeReaper() (*reaper, error) {
	waited := false
	for {
		g.poolMu.Lock()
		if n := len(g.idle); n > 0 {
			r := g.idle[n-1]
			g.idle = g.idle[:n-1]
			g.poolMu.Unlock()
			select {
			case <-r.exited:
				r.ctl.Close()
				continue // killed while idle
			default:
				return r, nil
			}
		}
		warming := g.warming
		g.poolMu.Unlock()
		if warming == nil || waited {
			return g.spawnReaper()
		}
		<-warming
		waited = true
	}
}

// putReaper keeps a reaper whose command ended cleanly for the next one.
func (g *Guest) putReaper(r *reaper) {
	syscall.Kill(r.pid, syscall.SIGCONT) // in case the command stopped it
	g.poolMu.Lock()
	keep := len(g.idle) < maxIdleReapers
	if keep {
		g.idle = append(g.idle, r)
	}
	g.poolMu.Unlock()
	if !keep {
		r.ctl.Close() // it exits at EOF
	}
}

// run hands the command and its stdio to the reaper.
func (r *reaper) run(req *guest.ExecRequest, files []*os.File) error {
	r.seq++
	frame := guest.AppendFrame(nil, guest.FrameOpen, r.seq, guest.EncodeExecRequest(req))
	fds := make([]int, len(files))
	for i, f := range files {
		fds[i] = int(f.Fd())
	}
	r.ctl.SetWriteDeadline(time.Now().Add(2 * time.Second))
	defer r.ctl.SetWriteDeadline(time.Time{})
	// One message with the descriptors, so that the reaper has the whole
	// frame in one read: the descriptors ride on its first byte.
	oob := syscall.UnixRights(fds...)
	n, _, err := r.ctl.WriteMsgUnix(frame, oob, nil)
	if err != nil {
		return err
	}
	if n < len(frame) { // a full socket buffer: the rest as plain data
		_, err = r.ctl.Write(frame[n:])
	}
	return err
}
