package local

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"

	"github.com/agentbox/agentbox/internal/sandbox"
)

// The descriptors bubblewrap gets, as ExtraFiles: fd 3 receives its info
// (the jail's pid), fd 4 holds the seccomp program; bubblewrap closes both
// before it executes the guest. fd 5, which bubblewrap passes on, is a
// pipe holding the guest's token (guest.TokenFDEnv): the token never
// appears in an environment, and the guest need not re-execute itself to
// hide it. fd 6, with a guest user of its own, is where bubblewrap waits
// until the backend has written the jail's user and group maps
// (--userns-block-fd); the guest marks it close-on-exec.
const (
	infoFD    = 3
	seccompFD = 4
	tokenFD   = 5
	usernsFD  = 6
)

// procMasks are /proc files that tell a sandbox about the host's kernel
// (Docker masks the same): covered with the host's /dev/null on a nodev
// mount, so that opening them fails. /proc/sys and /proc/sysrq-trigger
// need no cover: the jail's procfs belongs to its user namespace, in which
// the sandbox user holds no capability, so they refuse its writes.
var procMasks = []string{
	"/proc/keys", "/proc/kcore", "/proc/timer_list", "/proc/sched_debug",
	"/proc/latency_stats", "/proc/timer_stats",
}

// presentProcMasks are the procMasks this kernel has: bubblewrap cannot
// bind over a file that does not exist in a read-only procfs.
func presentProcMasks() []string {
	var out []string
	for _, p := range procMasks {
		if _, err := os.Lstat(p); err == nil {
			out = append(out, p)
		}
	}
	return out
}

// jailSpec is everything the bubblewrap command line is made from.
type jailSpec struct {
	id        string
	st        staged
	uid, gid  int
	masks     []string
	guestArgs []string
	// separate says the guest has a user of its own (see writeUserMaps).
	separate bool
}

// guestCaps are what the guest of a jail with a guest user starts with
// (ambient, as bubblewrap grants them): three it keeps, CAP_SETPCAP to
// empty its bounding set before it drops that too (initd.BecomeGuest).
var guestCaps = []string{"CAP_SETUID", "CAP_SETGID", "CAP_KILL", "CAP_SETPCAP"}

// bwrapArgs is the bubblewrap command line of one sandbox. Order matters:
// bubblewrap performs the mount operations in the order given.
func bwrapArgs(j jailSpec) []string {
	// Namespaces: user, pid, network (loopback only), ipc, uts, cgroup.
	a := []string{"--unshare-user"}
	if j.separate {
		// The backend writes the user namespace's maps (writeUserMaps): two
		// users map to themselves on the host, the guest's and the
		// commands'. bubblewrap 0.8 cannot combine this with
		// --disable-userns; the seccomp filter, which refuses unshare,
		// setns, clone with CLONE_NEWUSER and clone3 to the guest and
		// everything below it, is what keeps nested user namespaces out.
		a = append(a, "--userns-block-fd", strconv.Itoa(usernsFD))
	} else {
		// The sandbox user maps to itself on the host. No further user
		// namespaces inside (the seccomp filter refuses unshare as well).
		a = append(a, "--disable-userns", "--uid", strconv.Itoa(j.uid), "--gid", strconv.Itoa(j.gid))
	}
	a = append(a,
		"--unshare-pid", "--unshare-net", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup",
		"--hostname", hostname(j.id),
		// The guest is the pid namespace's init: when it dies the kernel
		// kills every process of the sandbox, and nothing inside can kill
		// it (PID 1 only gets signals it handles).
		"--as-pid-1",
		// The jail dies with bubblewrap's monitor, which dies with the
		// spawner thread (see spawner).
		"--die-with-parent",
		// No controlling terminal shared with anything (TIOCSTI).
		"--new-session",
		"--cap-drop", "ALL",
	)
	if j.separate {
		for _, c := range guestCaps {
			a = append(a, "--cap-add", c)
		}
	}
	a = append(a,
		"--info-fd", strconv.Itoa(infoFD),
		"--seccomp", strconv.Itoa(seccompFD),
		"--chdir", "/",
		// A read-only root: bubblewrap binds are nosuid and nodev.
		"--ro-bind", j.st.root, "/",
		"--proc", "/proc",
	)
	for _, m := range j.masks {
		a = append(a, "--ro-bind", os.DevNull, m)
	}
	a = append(a,
		// A minimal /dev (null, zero, full, random, urandom, tty, pts),
		// read-only but for /dev/shm. /dev/shm and /tmp are the sized tmpfs
		// mounts of the stage.
		"--dev", "/dev",
		"--bind", j.st.shm, "/dev/shm",
		"--remount-ro", "/dev",
		"--bind", j.st.tmp, "/tmp",
		"--bind", j.st.files, sandbox.WorkspaceDir,
		// /run is a tmpfs only to hold the two mount points (the image's
		// root is read-only), then read-only itself.
		"--tmpfs", "/run",
		// Read-only: connecting to the daemon's socket needs no write
		// access to the mount, and a writable run directory would let
		// the sandbox fill the daemon's disk outside every quota.
		"--ro-bind", j.st.run, sandbox.RunDir,
		"--ro-bind", j.st.guest, sandbox.GuestPath,
		"--remount-ro", "/run",
		"--", sandbox.GuestPath,
	)
	return append(a, j.guestArgs...)
}

// hostname is the sandbox's host name: its id with dashes (an underscore
// is not valid in a host name).
func hostname(id string) string { return strings.ReplaceAll(id, "_", "-") }

// bwrapVersion runs bwrap --version and returns its version.
func bwrapVersion(path string) ([3]int, error) {
	var v [3]int
	out, err := exec.Command(path, "--version").Output()
	if err != nil {
		return v, fmt.Errorf("%s --version: %w", path, err)
	}
	m := regexp.MustCompile(`(\d+)\.(\d+)(?:\.(\d+))?`).FindSubmatch(out)
	if m == nil {
		return v, fmt.Errorf("%s --version: no version in %q", path, bytes.TrimSpace(out))
	}
	for i := range v {
		v[i], _ = strconv.Atoi(string(m[i+1]))
	}
	return v, nil
}

// minBwrap is the oldest bubblewrap with every option used here
// (--disable-userns came in 0.8).
var minBwrap = [3]int{0, 8, 0}

func versionLess(a, b [3]int) bool {
	for i := range a {
		if a[i] != b[i] {
			return a[i] < b[i]
		}
	}
	return false
}
