package local

import (
	"errors"
	"fmt"
	"math"
	"os/exec"
	"runtime"
	"strings"
	"sync"

	"golang.org/x/sys/unix"
)

// The spawner is one goroutine locked to its own OS thread, from which
// every bubblewrap is started. Two things need that:
//
//   - bubblewrap's --die-with-parent is PR_SET_PDEATHSIG, which fires when
//     the thread that forked it exits, not the process. Go threads are
//     normally long-lived, but any goroutine that exits while locked to its
//     thread takes the thread with it; a thread that is locked for good by
//     this goroutine never exits while the backend is open, so sandboxes
//     die with the daemon and only with it (or with Close).
//   - on cgroup v1 the jail must be in its cgroups before it forks
//     anything, and better before bubblewrap creates its cgroup namespace.
//     v1 cgroups hold threads, so the spawner thread moves itself into the
//     sandbox's cgroups, forks bubblewrap (which inherits the thread's
//     cgroups), and moves itself back. There is no window in which a
//     process of the sandbox runs outside its limits. (v2 gets the same
//     with clone3's CLONE_INTO_CGROUP, SysProcAttr.UseCgroupFD.)
type spawner struct {
	// tid is the spawner thread's id, set before newSpawner returns.
	tid      int
	reqs     chan spawnReq
	quit     chan struct{}
	quitOnce sync.Once
	done     chan struct{}
}

type spawnReq struct {
	cmd *exec.Cmd
	// into are the v1 cgroup directories the thread moves to for the fork;
	// empty on v2 (the command carries a cgroup fd).
	into []string
	res  chan error
}

// newSpawner starts the spawner thread. home returns the thread's own v1
// cgroup directories, read on that thread (nil for v2); setup, when set,
// then runs on the thread before it starts anything (see
// enterSmallNamespace).
func newSpawner(home func() ([]string, error), setup func() error) (*spawner, error) {
	s := &spawner{reqs: make(chan spawnReq), quit: make(chan struct{}), done: make(chan struct{})}
	ready := make(chan error, 1)
	go s.lockThread(home, setup, ready, nil)
	if err := <-ready; err != nil {
		return nil, err
	}
	return s, nil
}

// lockThread locks the calling goroutine to its thread and runs the
// spawner there, unless the thread is the process's main thread: /proc/self
// names that one, and the mount table read through it must stay the
// daemon's (the spawner moves to a namespace of its own). The goroutine
// then holds the main thread until a new one has locked another thread
// (which it therefore cannot get), and lets it go. held, when set, is
// closed once the calling goroutine is locked.
func (s *spawner) lockThread(home func() ([]string, error), setup func() error, ready chan<- error, held chan<- struct{}) {
	runtime.LockOSThread()
	if held != nil {
		close(held)
	}
	if unix.Gettid() == unix.Getpid() {
		next := make(chan struct{})
		go s.lockThread(home, setup, ready, next)
		<-next
		runtime.UnlockOSThread()
		return
	}
	s.loop(home, setup, ready)
}

func (s *spawner) loop(home func() ([]string, error), setup func() error, ready chan<- error) {
	defer close(s.done)
	// Never unlocked (see lockThread): when this goroutine returns its
	// thread exits, and every bubblewrap it started gets SIGKILL.
	tid := unix.Gettid()
	s.tid = tid
	var back []string
	if home != nil {
		var err error
		if back, err = home(); err != nil {
			ready <- fmt.Errorf("reading the spawner thread's cgroups: %w", err)
			return
		}
	}
	if setup != nil {
		// On failure the thread exits with whatever half-made namespace
		// it has: nothing of it outlives the thread.
		if err := setup(); err != nil {
			ready <- fmt.Errorf("setting up the spawner thread: %w", err)
			return
		}
	}
	ready <- nil
	for {
		select {
		case r := <-s.reqs:
			r.res <- s.spawn(tid, back, r)
		case <-s.quit:
			return
		}
	}
}

func (s *spawner) spawn(tid int, back []string, r spawnReq) (err error) {
	// Inherited descriptors without close-on-exec (a socket-activated
	// listener, a pipe from whoever started the daemon) would reach the
	// jail: bubblewrap passes every open descriptor on to the guest.
	if err := unix.CloseRange(3, math.MaxUint32, unix.CLOSE_RANGE_CLOEXEC); err != nil {
		return fmt.Errorf("marking inherited descriptors close-on-exec: %w", err)
	}
	if len(r.into) > 0 {
		if err := moveThread(tid, r.into); err != nil {
			moveThread(tid, back)
			return err
		}
		defer func() {
			if merr := moveThread(tid, back); merr != nil {
				// The process already runs in its cgroups; but a spawner
				// thread stuck in a sandbox's cgroup would keep it from
				// being removed and charge the next fork to it.
				err = errors.Join(err, fmt.Errorf("moving the spawner thread back: %w", merr))
			}
		}()
	}
	return r.cmd.Start()
}

// start starts cmd on the spawner thread, inside the v1 cgroups into.
func (s *spawner) start(cmd *exec.Cmd, into []string) error {
	r := spawnReq{cmd: cmd, into: into, res: make(chan error, 1)}
	select {
	case s.reqs <- r:
	case <-s.done:
		return errClosed
	}
	return <-r.res
}

// check starts a jail from the spawner thread as a sandbox's starts, with
// every namespace, a read-only root, /proc and /dev, and runs true in it:
// the spawner's namespace must hold everything bubblewrap needs, not only
// its binary (a bwrap --version proves no more than that it executes).
func (s *spawner) check(bwrap string) error {
	truePath, err := exec.LookPath("true")
	if err != nil {
		return fmt.Errorf("checking the spawner: %w", err)
	}
	var out strings.Builder
	cmd := exec.Command(bwrap, "--unshare-all", "--die-with-parent", "--ro-bind", "/", "/",
		"--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp", "--", truePath)
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := s.start(cmd, nil); err != nil {
		return fmt.Errorf("starting %s from the spawner thread: %w", bwrap, err)
	}
	if err := cmd.Wait(); err != nil {
		return fmt.Errorf("a trial jail (%s %s) from the spawner thread: %w: %s", bwrap, truePath, err, strings.TrimSpace(out.String()))
	}
	return nil
}

// close ends the spawner thread, and with it every bubblewrap it started.
func (s *spawner) close() {
	s.quitOnce.Do(func() { close(s.quit) })
	<-s.done
}

var errClosed = errors.New("local backend is closed")
