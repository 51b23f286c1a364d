package initd

import (
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"strconv"
	"strings"
	"syscall"

	"github.com/agentbox/agentbox/internal/guest"
)

const (
	// tokenFDEnv tells the guest which descriptor holds its token: the
	// re-executed guest, or one started so by its backend.
	tokenFDEnv = guest.TokenFDEnv
	// reaperEnv tells the re-executed guest the pid and control socket of
	// the reaper started before the re-execution, as "PID:FD".
	reaperEnv = "AGENTBOX_GUEST_REAPER"
)

// TakeToken returns the guest's token and makes sure no process of the
// sandbox can read it. The token arrives in the environment, and a
// process's initial environment stays readable in /proc/PID/environ for
// its whole life; PR_SET_DUMPABLE hides it on Linux but not under gVisor,
// where not even another user's environ is closed to a process. So the
// guest re-executes itself (keeping its pid, 1) with the token in a pipe
// instead: the new image's environment never held it.
//
// Right before it re-executes, it starts the guest's first reaper (with
// policy l), which Run adopts: the reaper's start, which under gVisor
// costs as much as the guest's own, overlaps the re-executed guest's
// start instead of delaying the first command. Not when commands run as
// a user of their own (commands): the guest is then root, and carries
// the capabilities BecomeGuest needs across the re-execution in its
// inheritable set with an empty bounding set, which a reaper started now
// would inherit (or, started earlier, its bounding set). Run starts the
// first reaper then, once the guest has dropped root.
func TakeToken(l Landlock, commands *User) (string, error) {
	// Nothing the guest inherited (bubblewrap passes on every descriptor
	// it holds) reaches what it starts, save what it passes on itself.
	closeOnExecAbove(2)
	if v, ok := os.LookupEnv(tokenFDEnv); ok {
		os.Unsetenv(tokenFDEnv)
		fd, err := strconv.Atoi(v)
		if err != nil || fd < 3 {
			return "", fmt.Errorf("bad %s %q", tokenFDEnv, v)
		}
		f := os.NewFile(uintptr(fd), "token")
		defer f.Close()
		b, err := io.ReadAll(io.LimitReader(f, 4096))
		if err != nil {
			return "", fmt.Errorf("reading the token: %w", err)
		}
		return string(b), nil
	}
	token := os.Getenv(guest.TokenEnv)
	if token == "" {
		return "", errors.New("no token: set " + guest.TokenEnv)
	}
	r, w, err := os.Pipe()
	if err != nil {
		return "", err
	}
	if _, err := io.WriteString(w, token); err != nil {
		return "", fmt.Errorf("passing the token on: %w", err)
	}
	w.Close()
	exe, err := os.Executable()
	if err != nil {
		return "", fmt.Errorf("finding the guest binary: %w", err)
	}
	var env []string
	if commands != nil {
		// On the thread that executes, whose credentials the new image
		// gets; never unlocked, as the image is replaced.
		runtime.LockOSThread()
		if err := keepCapsAcrossExec(); err != nil {
			return "", err
		}
	} else if v, err := preStartReaper(exe, l); err == nil {
		// Best effort: without it, Run starts the first reaper itself.
		// It starts while the token pipe is still close-on-exec: a
		// reaper passes every descriptor it inherits on to the commands
		// it forks.
		env = append(env, reaperEnv+"="+v)
	}
	fd := r.Fd() // blocking, and kept across exec:
	if err := keepOnExec(int(fd)); err != nil {
		return "", fmt.Errorf("passing the token on: %w", err)
	}
	env = append(env, tokenFDEnv+"="+strconv.Itoa(int(fd)))
	for _, e := range os.Environ() {
		if !strings.HasPrefix(e, guest.TokenEnv+"=") && !strings.HasPrefix(e, tokenFDEnv+"=") && !strings.HasPrefix(e, reaperEnv+"=") {
			env = append(env, e)
		}
	}
	err = syscall.Exec(exe, os.Args, env)
	return "", fmt.Errorf("re-executing the guest: %w", err)
}

// preStartReaper starts a reaper whose control socket survives the
// guest's re-execution and returns the value of reaperEnv for it.
func preStartReaper(exe string, l Landlock) (string, error) {
	devnull, err := os.Open(os.DevNull)
	if err != nil {
		return "", err
	}
	defer devnull.Close() // close-on-exec in any case
	pid, ctl, err := forkReaper(exe, reaperArgv(l), devnull.Fd(), nil)
	if err != nil {
		return "", err
	}
	if err := keepOnExec(ctl); err != nil {
		syscall.Kill(pid, syscall.SIGKILL)
		syscall.Close(ctl)
		return "", err
	}
	return fmt.Sprintf("%d:%d", pid, ctl), nil
}

func keepOnExec(fd int) error {
	if _, _, e := syscall.Syscall(syscall.SYS_FCNTL, uintptr(fd), syscall.F_SETFD, 0); e != 0 {
		return e
	}
	return nil
}

// adoptReaper takes over the reaper TakeToken started, if any. It runs
// before reapLoop, so that the reaper's pid is known when it is reaped.
func (g *Guest) adoptReaper() (*reaper, error) {
	v, ok := os.LookupEnv(reaperEnv)
	if !ok {
		return nil, nil
	}
	os.Unsetenv(reaperEnv)
	ps, fs, _ := strings.Cut(v, ":")
	pid, err1 := strconv.Atoi(ps)
	fd, err2 := strconv.Atoi(fs)
	if err1 != nil || err2 != nil || pid <= 0 || fd < 3 {
		return nil, fmt.Errorf("bad %s %q", reaperEnv, v)
	}
	syscall.CloseOnExec(fd)
	g.mu.Lock()
	r := g.registerReaper(pid)
	g.mu.Unlock()
	if err := r.attach(fd); err != nil {
		syscall.Kill(pid, syscall.SIGKILL)
		return nil, err
	}
	return r, nil
}
