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
