package initd

import (
	"errors"
	"fmt"
	"runtime"
	"strconv"
	"strings"
	"syscall"

	ll "github.com/landlock-lsm/go-landlock/landlock/syscall"
	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/internal/guest"
)

// The commands' ruleset: everything read-only and executable, these
// places writable. Paths that do not exist in a sandbox are left out.
var (
	landlockRWDirs  = []string{guest.DefaultWorkdir, "/tmp", "/dev/shm", "/dev/pts"}
	landlockRWFiles = []string{"/dev/null", "/dev/zero", "/dev/random", "/dev/urandom", "/dev/tty"}
)

const (
	// fsRead is what the whole file system allows.
	fsRead = ll.AccessFSExecute | ll.AccessFSReadFile | ll.AccessFSReadDir
	// fsFile is every right that applies to a file that is not a
	// directory (Landlock refuses the others on such a rule).
	fsFile = ll.AccessFSExecute | ll.AccessFSWriteFile | ll.AccessFSReadFile | ll.AccessFSTruncate | ll.AccessFSIoctlDev
	// fsDevice is what a writable device allows: no execution.
	fsDevice = fsFile &^ ll.AccessFSExecute
)

// handledFS is every file system right the ruleset handles at a given
// ABI: all that this code knows of (later ABIs add rights that stay
// unhandled, which means allowed).
func handledFS(abi int) uint64 {
	h := uint64(1<<13 - 1) // ABI 1: execute .. make-symlink
	if abi >= 2 {
		h |= ll.AccessFSRefer // renames and links across directories
	}
	if abi >= 3 {
		h |= ll.AccessFSTruncate
	}
	if abi >= 5 {
		h |= ll.AccessFSIoctlDev
	}
	return h
}

// errLandlockUnavailable marks a kernel or runtime without Landlock.
var errLandlockUnavailable = errors.New("landlock unavailable")

// restrictThread puts the calling OS thread (and whatever it forks from
// now on) under the commands' ruleset, as far as the kernel's Landlock
// ABI allows, and says what it enforces. The thread must be locked: the
// restriction stays with it for good. It also sets no_new_privs on the
// thread, which Landlock requires of an unprivileged process.
func restrictThread(l Landlock) (guest.LandlockStatus, error) {
	st := guest.LandlockStatus{Mode: l.Mode}
	if l.Mode == guest.LandlockOff {
		return st, nil
	}
	fail := func(err error) (guest.LandlockStatus, error) {
		st.Enforced = false
		st.Detail = err.Error()
		return st, err
	}
	abi, err := ll.LandlockGetABIVersion()
	if err != nil {
		switch {
		case errors.Is(err, syscall.ENOSYS):
			err = fmt.Errorf("%w: the kernel or runtime has no Landlock (%v)", errLandlockUnavailable, err)
		case errors.Is(err, syscall.EOPNOTSUPP):
			err = fmt.Errorf("%w: Landlock is disabled in this kernel (%v)", errLandlockUnavailable, err)
		default:
			err = fmt.Errorf("%w: landlock_create_ruleset refused (a seccomp profile?): %v", errLandlockUnavailable, err)
		}
		return fail(err)
	}
	st.ABI = abi
	attr := ll.RulesetAttr{HandledAccessFS: handledFS(abi)}
	if abi >= 4 {
		attr.HandledAccessNet = ll.AccessNetBindTCP | ll.AccessNetConnectTCP
	}
	if abi >= 6 {
		attr.Scoped = ll.ScopeAbstractUnixSocket
		// Kernels without erratum 2 fixed also refuse signals between
		// the threads of one process once those are in different
		// domains; go-landlock skips signal scoping there as well.
		if errata, err := ll.LandlockGetErrata(); err == nil && errata&2 != 0 {
			attr.Scoped |= ll.ScopeSignal
		}
	}
	fd, err := ll.LandlockCreateRuleset(&attr, 0)
	if err != nil {
		return fail(fmt.Errorf("%w: landlock_create_ruleset: %v", errLandlockUnavailable, err))
	}
	defer syscall.Close(fd)

	var writable []string
	add := func(path string, rights uint64) error {
		pfd, err := unix.Open(path, unix.O_PATH|unix.O_CLOEXEC, 0)
		if err != nil {
			if errors.Is(err, syscall.ENOENT) && path != "/" {
				return nil
			}
			return fmt.Errorf("landlock rule for %s: %w", path, err)
		}
		defer unix.Close(pfd)
		var s unix.Stat_t
		if err := unix.Fstat(pfd, &s); err != nil {
			return fmt.Errorf("landlock rule for %s: %w", path, err)
		}
		if s.Mode&unix.S_IFMT != unix.S_IFDIR {
			rights &= fsFile
		}
		rule := ll.PathBeneathAttr{AllowedAccess: rights & attr.HandledAccessFS, ParentFd: pfd}
		if err := ll.LandlockAddPathBeneathRule(fd, &rule, 0); err != nil {
			return fmt.Errorf("landlock rule for %s: %w", path, err)
		}
		if path != "/" {
			writable = append(writable, path)
		}
		return nil
	}
	if err := add("/", fsRead); err != nil {
		return fail(err)
	}
	for _, p := range landlockRWDirs {
		if err := add(p, attr.HandledAccessFS); err != nil {
			return fail(err)
		}
	}
	for _, p := range landlockRWFiles {
		if err := add(p, fsDevice); err != nil {
			return fail(err)
		}
	}
	var ports []string
	if attr.HandledAccessNet != 0 {
		for _, p := range l.ConnectTCP {
			rule := ll.NetPortAttr{AllowedAccess: ll.AccessNetConnectTCP, Port: uint64(p)}
			if err := ll.LandlockAddNetPortRule(fd, &rule, 0); err != nil {
				return fail(fmt.Errorf("landlock rule for TCP port %d: %w", p, err))
			}
			ports = append(ports, strconv.Itoa(int(p)))
		}
	}
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return fail(fmt.Errorf("PR_SET_NO_NEW_PRIVS: %w", err))
	}
	if err := ll.LandlockRestrictSelf(fd, 0); err != nil {
		return fail(fmt.Errorf("landlock_restrict_self: %w", err))
	}

	st.Enforced = true
	d := []string{fmt.Sprintf("ABI %d; file system read-only but %s", abi, strings.Join(writable, " "))}
	if attr.HandledAccessNet != 0 {
		if len(ports) == 0 {
			d = append(d, "no TCP bind or connect")
		} else {
			d = append(d, "no TCP bind, TCP connect only to port "+strings.Join(ports, ","))
		}
	} else {
		d = append(d, "TCP not restricted (needs ABI 4)")
	}
	switch {
	case attr.Scoped&ll.ScopeSignal != 0:
		d = append(d, "abstract unix sockets and signals scoped")
	case attr.Scoped != 0:
		d = append(d, "abstract unix sockets scoped, signals not (kernel lacks the erratum 2 fix)")
	default:
		d = append(d, "abstract unix sockets and signals not scoped (needs ABI 6)")
	}
	st.Detail = strings.Join(d, "; ")
	return st, nil
}

// probeLandlock finds out what restrictThread enforces here by running it
// on a thread that is thrown away afterwards: the guest itself stays
// unrestricted.
func probeLandlock(l Landlock) guest.LandlockStatus {
	if l.Mode == guest.LandlockOff {
		return guest.LandlockStatus{Mode: l.Mode}
	}
	ch := make(chan guest.LandlockStatus, 1)
	go func() {
		// Never unlocked: the runtime ends the thread with the goroutine.
		runtime.LockOSThread()
		st, _ := restrictThread(l)
		ch <- st
	}()
	return <-ch
}
