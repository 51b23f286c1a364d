// Package apitypes holds the request and reply shapes of agentbox's public
// API that every surface shares: the HTTP server (internal/api) encodes
// them, the Go client (client/) re-exports them as aliases, and the MCP
// server returns them as structured output. The domain packages that
// compute them (manager, fileapi) return these types, so that a field is
// declared once and cannot drift between the server and its clients.
//
// The package depends on nothing of agentbox: it is the innermost layer.
// Types that the server still declares elsewhere (repos, workspaces,
// sandboxes, grep) move here as the OpenAPI document is generated from
// this package (issue 12, item 8).
package apitypes

import (
	"encoding/base64"
	"time"
)

// --- files

// FileInfo describes one entry of a workspace with lstat semantics.
type FileInfo struct {
	// Path is the cleaned path relative to the workspace root, "." for
	// the root itself.
	Path string `json:"path"`
	Name string `json:"name"`
	// Type is "file", "dir", "symlink" or "other".
	Type string `json:"type"`
	Size int64  `json:"size"`
	// Mode is the octal permission with the setuid, setgid and sticky
	// bits, e.g. "0644".
	Mode    string    `json:"mode"`
	ModTime time.Time `json:"mod_time"`
	// LinkTarget is a symlink's target as readlink returns it; it is
	// never followed.
	LinkTarget string `json:"link_target,omitempty"`
}

// FileList is the reply to a directory listing.
type FileList struct {
	// Path is the directory listed.
	Path string `json:"path"`
	// Depth is how many levels were listed: 1 is the directory's own
	// entries.
	Depth int `json:"depth"`
	// Entries are in depth-first order, each directory's entries sorted
	// by name and followed by what is inside them.
	Entries []FileInfo `json:"entries"`
	// Truncated says the listing stopped at its entry budget.
	Truncated bool `json:"truncated"`
}

// FileContent is a file, or the part of it a ranged read selected, as a
// JSON document.
type FileContent struct {
	Path string `json:"path"`
	// Size is the size of the whole file.
	Size int64 `json:"size"`
	// Offset is the file offset of the first byte returned; Length the
	// number of bytes returned.
	Offset int64 `json:"offset"`
	Length int64 `json:"length"`
	// EOF says the content reaches the end of the file.
	EOF bool `json:"eof"`
	// Encoding is "utf-8" when Content is the bytes as text, "base64"
	// when they are not valid UTF-8.
	Encoding string `json:"encoding"`
	Content  string `json:"content"`
	// FirstLine and LastLine are the 1-based numbers of the first and last
	// line returned, for a read by lines (0 otherwise, and LastLine is 0
	// when no line was in range).
	FirstLine int `json:"first_line,omitempty"`
	LastLine  int `json:"last_line,omitempty"`
	// Lines are the lines returned by a read by lines, numbered, without
	// their newline.
	Lines []Line `json:"lines,omitempty"`
}

// Line is one numbered line of a file.
type Line struct {
	// N is the 1-based line number.
	N    int    `json:"line"`
	Text string `json:"text"`
}

// EditRequest replaces an exact string in a file.
type EditRequest struct {
	Path string `json:"path"`
	// Old is the exact text to replace (whitespace and line ends
	// included); it must not be empty.
	Old string `json:"old"`
	// New replaces it; empty deletes it.
	New string `json:"new"`
	// All replaces every occurrence; without it Old must occur exactly
	// once.
	All bool `json:"all,omitempty"`
}

// EditResult says what an edit changed.
type EditResult struct {
	Path string `json:"path"`
	// Replacements is the number of occurrences replaced.
	Replacements int `json:"replacements"`
	// Lines are the 1-based line numbers, in the file as it was, where
	// the replaced occurrences started.
	Lines []int `json:"lines"`
	// Size is the file's size after the edit.
	Size int64 `json:"size"`
}

// FindRequest looks for paths by glob.
type FindRequest struct {
	// Pattern is a glob: "*", "?" and "[...]" match within one path
	// component, "**" matches any number of components. A pattern
	// without "/" matches entries by name at any depth ("*.go"); one
	// with "/" matches whole paths relative to Path ("src/**/*_test.go").
	Pattern string `json:"pattern"`
	// Path is the directory searched, default the root.
	Path string `json:"path,omitempty"`
	// Type keeps only entries of one type: "file", "dir", "symlink" or
	// "other"; empty keeps all.
	Type string `json:"type,omitempty"`
	// MaxResults stops the search after this many matches (default 1000,
	// at most 10000).
	MaxResults int `json:"max_results,omitempty"`
	// IncludeGit searches .git directories too.
	IncludeGit bool `json:"include_git,omitempty"`
}

// FindResult is what a find matched, in path order.
type FindResult struct {
	Matches []FileInfo `json:"matches"`
	// Truncated says the search stopped early: at MaxResults, at the walk
	// budget, below the depth limit, or because its time ran out.
	Truncated bool `json:"truncated"`
}

// --- exec

// ExecRequest is a command to run in a workspace's sandbox.
//
// Sent as application/json, the request is one document and Stdin its
// whole input. Sent as application/x-ndjson, it is the body's first line
// and the input streams in the lines after it (StdinLine).
type ExecRequest struct {
	// Argv is the command and its arguments, run without a shell.
	Argv []string `json:"argv,omitempty"`
	// Sh is a shell command line, run as sh -c SH; set it or Argv, not
	// both.
	Sh string `json:"sh,omitempty"`
	// Env holds the command's KEY=VALUE variables, which win over the
	// sandbox policy's; nothing is inherited from the daemon.
	Env []string `json:"env,omitempty"`
	// Workdir defaults to /workspace.
	Workdir string `json:"workdir,omitempty"`
	// Timeout is a Go duration ("30s"); empty means none.
	Timeout string `json:"timeout,omitempty"`
	// MaxOutputBytes caps stdout and stderr each.
	MaxOutputBytes int64 `json:"max_output_bytes,omitempty"`
	// Stdin is fed to the command (at most 16 MiB).
	Stdin string `json:"stdin,omitempty"`
}

// ExecResult is how a command ended: the last line of an exec stream.
type ExecResult struct {
	ExecID    string `json:"exec_id"`
	SandboxID string `json:"sandbox_id"`
	// Replaced says the workspace's sandbox was gone and a new one ran
	// the command.
	Replaced bool `json:"replaced"`
	ExitCode int  `json:"exit_code"`
	// Signal is the signal that ended the command, 0 if none.
	Signal   int  `json:"signal,omitempty"`
	TimedOut bool `json:"timed_out"`
	Canceled bool `json:"canceled,omitempty"`
	// OOM says the command (on gVisor, its whole sandbox) was killed for
	// exceeding the memory limit.
	OOM bool `json:"oom,omitempty"`
	// Lost says the sandbox died while the command ran.
	Lost            bool  `json:"lost"`
	StdoutTruncated bool  `json:"stdout_truncated,omitempty"`
	StderrTruncated bool  `json:"stderr_truncated,omitempty"`
	StdoutBytes     int64 `json:"stdout_bytes"`
	StderrBytes     int64 `json:"stderr_bytes"`
	DurationMS      int64 `json:"duration_ms"`
	// CPUNanos and PeakMemBytes are the command tree's CPU time and the
	// peak resident set of its largest process (0: unknown).
	CPUNanos     int64 `json:"cpu_ns"`
	PeakMemBytes int64 `json:"peak_mem_bytes"`
}

// ExecOutput is the one-document reply of a buffered exec: how the command
// ended and all of its output, within the output cap.
type ExecOutput struct {
	// Stdout and Stderr are the command's output as text. Bytes that are
	// not valid UTF-8 are replaced (U+FFFD) here and StdoutB64 or
	// StderrB64 carries the exact bytes.
	Stdout    string `json:"stdout"`
	Stderr    string `json:"stderr"`
	StdoutB64 string `json:"stdout_b64,omitempty"`
	StderrB64 string `json:"stderr_b64,omitempty"`
	ExitCode  int    `json:"exit_code"`
	// Signal is the signal that ended the command, 0 if none.
	Signal   int  `json:"signal"`
	TimedOut bool `json:"timed_out"`
	OOM      bool `json:"oom"`
	// Truncated says stdout or stderr reached the output cap: the rest
	// was dropped (the command ran on) and the text ends with a
	// truncation note.
	Truncated  bool  `json:"truncated"`
	DurationMS int64 `json:"duration_ms"`

	ExecID          string `json:"exec_id"`
	SandboxID       string `json:"sandbox_id"`
	Replaced        bool   `json:"replaced"`
	Canceled        bool   `json:"canceled,omitempty"`
	Lost            bool   `json:"lost"`
	StdoutTruncated bool   `json:"stdout_truncated,omitempty"`
	StderrTruncated bool   `json:"stderr_truncated,omitempty"`
	// StdoutBytes and StderrBytes count everything the command wrote,
	// kept or dropped.
	StdoutBytes  int64 `json:"stdout_bytes"`
	StderrBytes  int64 `json:"stderr_bytes"`
	CPUNanos     int64 `json:"cpu_ns"`
	PeakMemBytes int64 `json:"peak_mem_bytes"`
}

// Result is the ExecResult part of o.
func (o ExecOutput) Result() ExecResult {
	return ExecResult{
		ExecID: o.ExecID, SandboxID: o.SandboxID, Replaced: o.Replaced, ExitCode: o.ExitCode, Signal: o.Signal,
		TimedOut: o.TimedOut, Canceled: o.Canceled, OOM: o.OOM, Lost: o.Lost,
		StdoutTruncated: o.StdoutTruncated, StderrTruncated: o.StderrTruncated,
		StdoutBytes: o.StdoutBytes, StderrBytes: o.StderrBytes, DurationMS: o.DurationMS,
		CPUNanos: o.CPUNanos, PeakMemBytes: o.PeakMemBytes,
	}
}

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
	State string `json:"state"`
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
}

// ProcessList is the reply to a listing of processes, newest first.
type ProcessList struct {
	Processes []Process `json:"processes"`
}

// ProcessLogs is a slice of one output stream of a process: the reply to
// a read of its logs, and each line of a followed read (NDJSON).
type ProcessLogs struct {
	// Stream is stdout or stderr.
	Stream string `json:"stream"`
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
