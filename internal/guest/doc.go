// Package guest is the protocol between the agentbox daemon and the guest,
// the init process of every sandbox (cmd/agentbox-guest, internal/guest/initd),
// and the daemon's side of it: Listener, Conn, Process and PTYSession.
//
// # Transport
//
// The daemon listens on a unix socket in a per-sandbox host directory that
// is bind-mounted into the sandbox (at DefaultSocketPath); the guest dials
// it when it starts, and again with backoff whenever the connection drops,
// for as long as it lives. gVisor (with --host-uds=open) lets a sandbox
// connect to a host socket but not serve one, so the guest is always the
// client. The guest's first frame carries a per-sandbox token, which the
// daemon compares in constant time; nothing the guest sends is trusted.
//
// # Who can reach the guest
//
// Commands are the code nobody has read; the guest holds the sandbox's
// control channel. So the guest runs as a user of its own, apart from the
// sandbox user its commands run as (SECURITY.md H44): the daemon makes the
// per-sandbox run directory that user's (mode 0711) and the control and
// egress sockets in it that user's alone (mode 0600); the guest keeps
// only CAP_SETUID, CAP_SETGID and CAP_KILL, to start each reaper as the
// sandbox user (which then executes with no capability and an empty
// bounding set) and to signal what it started. A backend starts it either
// as root with those capabilities (docker, gvisor: an OCI runtime grants
// a non-root user none) or with them ambient (bubblewrap), and the guest
// drops the rest before anything else runs (initd.BecomeGuest).
//
// A separate user, rather than hiding the socket's path, because:
//   - the path must stay usable by the guest: gVisor lets a sandbox reach
//     a host socket only by connecting to its path (--host-uds=open), the
//     guest dials the control socket again when its connection drops, and
//     it dials the egress socket once per proxied connection. Holding a
//     descriptor of the directory while unmounting the path would need
//     CAP_SYS_ADMIN, and a descriptor of a host directory leads out of the
//     sandbox through "..". File permissions are checked by the kernel
//     under runc and bubblewrap and by gVisor's sentry alike;
//   - the same boundary covers the guest's process: signalling another
//     user's process takes CAP_KILL, however the target is named (a pidfd
//     made by opening /proc/PID escapes any pid-based seccomp rule), and
//     its /proc files, descriptors and memory take the same user and a
//     dumpable process, or CAP_SYS_PTRACE.
//
// What stays: gVisor lists /proc/PID/fdinfo of any process to any other,
// whatever their users, and before release-20251215.0 it serves environ,
// auxv, maps and smaps and lists the fd directory too (none of those
// descriptors opens, and the guest's environment holds no token: see
// initd.TakeToken). Reapers run as the sandbox user, so a command can
// signal or stop its own reaper, which the guest then replaces or kills.
//
// Anything else that connects to the control socket (no hello, a wrong
// token, a second connection once the guest's is up, a second hello on
// it) is refused, logged and reported (ListenOptions.OnRefused): the
// daemon records it as a guest.refused event of the sandbox.
//
// # Frames
//
// One connection carries any number of concurrent commands, each on its own
// stream. Every frame is
//
//	length uint32 | type uint8 | stream uint32 | payload [length]byte
//
// big-endian, with a payload of at most MaxFrameSize bytes and a per-type
// size range: a decoder refuses an unknown type or a bad length from the
// header alone, before it reads or allocates the payload. Stream 0 is the
// connection itself (hello, ping, pong, fatal errors); the daemon opens
// streams with increasing ids.
//
// A command's stream: the daemon sends FrameOpen (an ExecRequest), then
// stdin data, stdin-close, signals, kills and resizes; the guest answers
// FrameStarted (the pid) or FrameError (the command could not start), then
// stdout and stderr data, and FrameExit (the result) once the command and
// every process it started are gone.
//
// A command opened with TTY runs on a pseudo-terminal of the sandbox's own
// devpts, opened by the guest as the sandbox user and made the command's
// controlling terminal in the foreground: stdout carries everything the
// terminal shows (there is no stderr), stdin is typed into it, a resize
// sets its size (the command gets SIGWINCH), and stdin-close types the
// terminal's EOF character (see ExecRequest.TTY). Signals and kills work
// as for any command: a kill reaches the whole tree.
//
// # Flow control
//
// Each data channel of a stream (stdin, stdout, stderr) has a window of
// InitialWindow bytes. A sender may only send what the receiver has
// granted, and the receiver grants more (FrameWindow) as the data reaches
// its destination: the guest reads a command's output only when it may
// send it, so a slow reader on the daemon side makes the command block on
// its pipe instead of making anyone buffer. A peer that sends beyond its
// window is cut off.
//
// # Commands in the guest
//
// See package initd: each command runs under a reaper that is a child
// subreaper, so a timeout or a kill reaches the whole tree, including
// processes that ignore signals, call setsid, double-fork or are stopped.
// Output past a command's cap is dropped after a truncation marker while the
// command keeps running. When the connection drops, the guest kills the
// commands of that connection: nobody is left to read their results, and
// the daemon reports them Lost.
package guest
