// Package initd is the guest's side of agentbox: the init process that runs
// inside every sandbox, dials the daemon's socket, and runs commands.
//
// Each command runs under its own reaper, a copy of the guest binary
// started as "agentbox-guest reaper" that sets PR_SET_CHILD_SUBREAPER:
// whatever the command forks, even after setsid or a double fork, stays
// in the reaper's subtree, so that killing "every descendant of the reaper"
// kills the command's whole tree. The reaper starts the command, reports its
// status, and kills what the command left behind when it exits; the guest
// keeps one idle reaper ready so that a command does not wait for a Go
// runtime to start. The first one starts before anything else, even
// before the guest re-executes itself to hide its token (TakeToken), and
// the next one once a command has started, not while it starts.
//
// A reaper leads a session of its own, in which each command is a process
// group (on a terminal, the foreground one of the reaper's terminal): job
// control then works as on Linux on every runtime, gVisor included. A
// reaper that served a terminal serves nothing else.
//
// A reaper's main thread, which forks the commands, carries what the
// commands inherit: a seccomp filter that keeps them from signalling,
// tracing or limiting the guest, and, when the guest runs with --landlock,
// a Landlock ruleset (landlock_linux.go): the root read-only, /workspace,
// /tmp, /dev/shm, /dev/pts and a few devices writable, no TCP bind and TCP
// connect only to the allowed ports, abstract unix sockets and signals
// scoped to the command's own processes. The guest itself stays outside
// it; it tries the ruleset on a throwaway thread to report, in its hello,
// what the commands get.
//
// When its commands run as a user apart from its own (see package guest
// and BecomeGuest), the guest starts each reaper as that user; the reaper
// and its commands then hold no capability at all, and nothing of the
// guest's (its sockets, its process) is theirs to reach.
//
// The guest itself is PID 1 (or a subreaper under a runtime that keeps
// PID 1): it reaps every zombie, and kills any process that escaped its
// reaper because the reaper was killed from inside the sandbox.
package initd
