package apitypes

import (
	"encoding/base64"
	"time"
)

// --- background processes

// Process is a command started detached from its request (a background
// process): it runs until it exits, is killed, times out or its sandbox
// stops, and the daemon keeps the last RingBytes of each of its stdout and
// stderr. It is also an exec: its ID is its exec record's.
type Process struct {
	// ID names the process and its exec record (ex_...).
	ID          string `json:"id"`
	WorkspaceID string `json:"workspace_id"`
	SandboxID   string `json:"sandbox_id"`
	// Replaced says the workspace's sandbox was gone and a new one was
	// started for this process.
	Replaced bool     `json:"replaced,omitempty"`
	Argv     []string `json:"argv"`
	// Pid is the command's process id inside the sandbox.
	Pid int `json:"pid"`
	// State is running, exited, timed_out, killed (by a signal the caller
	// sent through the API, or a SIGKILL) or lost (its sandbox stopped,
	// was removed or died, or the daemon restarted: the command is gone).
	State string `json:"state" enum:"running,exited,timed_out,killed,lost"`
	// ExitCode is the command's exit status; -1 while it runs, and when
	// it was lost or ended by a signal.
	ExitCode int `json:"exit_code"`
	// Signal is the signal that ended the command, 0 if none.
	Signal int `json:"signal,omitempty"`
	// OOM says the command (on gVisor, its sandbox) was killed for
	// exceeding the memory limit.
	OOM bool `json:"oom,omitempty"`
	// Reason says why the process ended when it did not end on its own,
	// e.g. "sandbox sb_... was stopped".
	Reason     string     `json:"reason,omitempty"`
	StartedAt  time.Time  `json:"started_at"`
	FinishedAt *time.Time `json:"finished_at,omitempty"`
	// StdoutBytes and StderrBytes count what the command wrote so far:
	// the offset the next byte of each stream will have.
	StdoutBytes int64 `json:"stdout_bytes"`
	StderrBytes int64 `json:"stderr_bytes"`
	// RingBytes is how much of each stream the daemon keeps: a read from
	// an offset older than StdoutBytes-RingBytes starts at the oldest byte
	// kept and says how many were dropped.
	RingBytes int64 `json:"ring_bytes"`
	// StdinClosed says the command's input was closed.
	StdinClosed bool `json:"stdin_closed,omitempty"`
	// TTY says the command runs on a terminal (its output is all stdout);
	// Cols and Rows are the terminal's size as last set.
	TTY  bool `json:"tty,omitempty"`
	Cols int  `json:"cols,omitempty"`
	Rows int  `json:"rows,omitempty"`
}

// ProcessList is the reply to a listing of processes, newest first.
type ProcessList struct {
	Processes []Process `json:"processes"`
}

// ProcessLogs is a slice of one output stream of a process or of a
// running exec: the reply to a read of its logs, and each line of a
// followed read (NDJSON).
type ProcessLogs struct {
	// Stream is stdout or stderr.
	Stream string `json:"stream" enum:"stdout,stderr"`
	// Offset is the stream offset of Data's first byte.
	Offset int64 `json:"offset"`
	// Dropped is how many bytes from the offset asked for had already
	// fallen out of the ring: Offset is then the asked offset plus Dropped.
	Dropped int64 `json:"dropped,omitempty"`
	// Data is the bytes as text; DataB64 carries them exactly when they
	// are not valid UTF-8 (a chunk may end inside a character).
	Data    string `json:"data"`
	DataB64 string `json:"data_b64,omitempty"`
	// NextOffset is where the next read continues: Offset + len(bytes).
	NextOffset int64 `json:"next_offset"`
	// Process is the process as of the read; a followed read sends it
	// on its last line only, once the process has ended and every byte
	// was sent.
	Process *Process `json:"process,omitempty"`
	// Exec is the exec as of the read, for the output of an exec
	// (/v1/execs/{id}/output); a followed read sends it on its last line
	// only, once the exec has ended and every byte was sent.
	Exec *LiveExec `json:"exec,omitempty"`
}

// --- live execs

// LiveExec is an exec this daemon runs for a request that waits for it
// (not a background process), while it runs and for a short while after:
// the daemon keeps the last RingBytes of each of its stdout and stderr,
// so that any client, not only the one that started it, can follow its
// output (/v1/execs/{id}/output).
type LiveExec struct {
	// ID is the exec's record (ex_...).
	ID          string   `json:"id"`
	WorkspaceID string   `json:"workspace_id"`
	SandboxID   string   `json:"sandbox_id"`
	Argv        []string `json:"argv"`
	// State is running, or how the exec ended: exited, timed_out, killed
	// or lost.
	State string `json:"state" enum:"running,exited,timed_out,killed,lost"`
	// ExitCode is the command's exit status; -1 while it runs, and when it
	// was lost or ended by a signal.
	ExitCode   int        `json:"exit_code"`
	StartedAt  time.Time  `json:"started_at"`
	FinishedAt *time.Time `json:"finished_at,omitempty"`
	// StdoutBytes and StderrBytes count what the command wrote so far.
	StdoutBytes int64 `json:"stdout_bytes"`
	StderrBytes int64 `json:"stderr_bytes"`
	// RingBytes is how much of each stream the daemon keeps; 0 when it
	// keeps none of this exec's (more execs ran at once than the daemon
	// keeps output for).
	RingBytes int64 `json:"ring_bytes"`
}

// LiveExecList is the reply to a listing of a workspace's live execs,
// newest first.
type LiveExecList struct {
	Execs []LiveExec `json:"execs"`
}

// LogQuery selects what a read of a process's logs returns (the query
// parameters stream, offset and limit of its route).
type LogQuery struct {
	// Stream is "stdout" (default) or "stderr".
	Stream string `json:"stream,omitempty"`
	// Offset is the stream offset to read from; negative counts from the
	// end (-1000: the last 1000 bytes).
	Offset int64 `json:"offset,omitempty"`
	// Limit bounds the bytes returned (default and most: 1 MiB, the ring).
	Limit int `json:"limit,omitempty"`
}

// ProcessStdin is input for a process.
type ProcessStdin struct {
	// Data is text; DataB64 bytes, base64 (set one).
	Data    string `json:"data,omitempty"`
	DataB64 string `json:"data_b64,omitempty"`
	// Close closes the command's input after the data: it reads end of
	// file.
	Close bool `json:"close,omitempty"`
}

// ProcessStdinResult says how much input a process took.
type ProcessStdinResult struct {
	// Written is the number of bytes queued for the command.
	Written int64 `json:"written"`
	Closed  bool  `json:"closed"`
}

// ProcessSignal sends a signal to a process.
type ProcessSignal struct {
	// Signal is a name (TERM, SIGTERM, KILL, INT, HUP, ...) or a number;
	// empty means TERM. It reaches every process of the command's tree;
	// KILL ends the command for good.
	Signal string `json:"signal,omitempty"`
}

// ProcessResize sets the size of a process's terminal.
type ProcessResize struct {
	// Cols and Rows are the new size, each 1 to 1000.
	Cols int `json:"cols"`
	Rows int `json:"rows"`
}

// ProcessWait waits for a process to end.
type ProcessWait struct {
	// Timeout bounds the wait (a Go duration, default 30s, at most 10m);
	// the reply then shows the process still running.
	Timeout string `json:"timeout,omitempty"`
}

// --- ports

// PortRequest publishes a port of a workspace's sandbox.
type PortRequest struct {
	// Port is the TCP port a server listens on inside the sandbox, on its
	// loopback (or on every address: the sandbox has only loopback).
	Port int `json:"port"`
}

// Port is a port of a sandbox published on the host: a listener on the
// host's loopback whose every connection the daemon relays, through the
// guest, to the port on the sandbox's own loopback. The sandbox itself
// gains no route out.
type Port struct {
	WorkspaceID string `json:"workspace_id"`
	SandboxID   string `json:"sandbox_id"`
	// Port is the port inside the sandbox.
	Port int `json:"port"`
	// URL is http://127.0.0.1:HOSTPORT/, HostAddr its address.
	URL      string `json:"url"`
	HostAddr string `json:"host_addr"`
	// ProxyPath is the same port through the API (its token applies):
	// /v1/sandboxes/{id}/ports/{port}/.
	ProxyPath string    `json:"proxy_path"`
	CreatedAt time.Time `json:"created_at"`
	// Connections counts the connections relayed so far; Active those
	// open now.
	Connections int64 `json:"connections"`
	Active      int64 `json:"active"`
}

// PortRemoved is the reply to unpublishing a port.
type PortRemoved struct {
	Port    int  `json:"port"`
	Removed bool `json:"removed"`
}

// PortList is the reply to a listing of published ports.
type PortList struct {
	Ports []Port `json:"ports"`
}

// Bytes is the chunk's data as the process wrote it: DataB64 decoded when
// set, else Data.
func (l ProcessLogs) Bytes() []byte {
	if l.DataB64 != "" {
		if b, err := base64.StdEncoding.DecodeString(l.DataB64); err == nil {
			return b
		}
	}
	return []byte(l.Data)
}
