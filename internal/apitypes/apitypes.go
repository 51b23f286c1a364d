// Package apitypes holds the request and reply shapes of agentbox's public
// API that every surface shares: the HTTP server (internal/api) encodes
// them, the Go client (client/) re-exports them as aliases, and the MCP
// server returns them as structured output. The domain packages that
// compute them (manager, fileapi) return these types, so that a field is
// declared once and cannot drift between the server and its clients. The
// store keeps the records that are the API's own (Repo, Workspace, Event,
// SandboxUsage) as these types; the server converts the others (a
// sandbox's record holds a token hash the API never shows).
//
// internal/api/openapi.json is generated from these types and the API's
// route table (go generate ./internal/api): field names, types, which
// fields are always present (no omitempty), the values an `enum` tag
// lists, and each type's and field's doc comment. A `schema` tag names
// the component a json.RawMessage field holds (a policy document is read
// strictly by package policy, not by encoding/json).
//
// The package depends on nothing of agentbox: it is the innermost layer.
package apitypes

import "time"

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
	// New replaces it; empty (or absent) deletes it.
	New string `json:"new,omitempty"`
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
	// TTY runs the command on a pseudo-terminal of its own, Cols columns
	// by Rows rows, as its controlling terminal: its stdin, stdout and
	// stderr are the terminal, everything it shows arrives as stdout
	// (there is no stderr), input is typed into it, and the end of input
	// types the terminal's EOF character (^D). TERM is xterm-256color
	// unless the image, the policy or Env sets it.
	TTY bool `json:"tty,omitempty"`
	// Cols and Rows are the terminal's size (default 80x24, each at most
	// 1000); only with TTY.
	Cols int `json:"cols,omitempty"`
	Rows int `json:"rows,omitempty"`
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

// FileRemoved is the reply to a file removal.
type FileRemoved struct {
	Path    string `json:"path"`
	Removed bool   `json:"removed"`
}

// MkdirRequest makes a directory.
type MkdirRequest struct {
	Path string `json:"path"`
	// Parents makes missing parent directories too.
	Parents bool `json:"parents,omitempty"`
}

// RenameRequest moves a path within the workspace; the reply repeats it.
type RenameRequest struct {
	From string `json:"from"`
	To   string `json:"to"`
}

// GrepRequest is one bounded content search over a subtree of the
// workspace.
type GrepRequest struct {
	// Pattern is a regular expression in RE2 syntax.
	Pattern string `json:"pattern"`
	// Path is the subtree or single file searched, default the root.
	Path string `json:"path,omitempty"`
	// IgnoreCase matches case-insensitively.
	IgnoreCase bool `json:"ignore_case,omitempty"`
	// MaxMatches stops the search (default 1000, at most 10000).
	MaxMatches int `json:"max_matches,omitempty"`
	// MaxFileBytes skips larger files (default 4 MiB).
	MaxFileBytes int64 `json:"max_file_bytes,omitempty"`
	// IncludeGit searches .git directories too.
	IncludeGit bool `json:"include_git,omitempty"`
}

// GrepMatch is one matching line.
type GrepMatch struct {
	// Path is the file's path relative to the workspace.
	Path string `json:"path"`
	// Line is the 1-based line number.
	Line int `json:"line"`
	// Text is the line without its newline, cut to 512 bytes.
	Text string `json:"text"`
}

// GrepResult is what a search found, in name order.
type GrepResult struct {
	Matches []GrepMatch `json:"matches"`
	// FilesScanned counts the text files whose contents were searched.
	FilesScanned int `json:"files_scanned"`
	// Truncated says the search stopped early: at MaxMatches, at the walk
	// budget (100000 entries), below the depth limit (256), or because
	// its time ran out.
	Truncated bool `json:"truncated"`
}

// --- exec streams

// StdinLine is one line of a streamed exec request (Content-Type:
// application/x-ndjson) after the first: a chunk of input as text or as
// base64, or the end of the input. A body that ends also ends the input.
type StdinLine struct {
	Stdin    string `json:"stdin,omitempty"`
	StdinB64 string `json:"stdin_b64,omitempty"`
	StdinEOF bool   `json:"stdin_eof,omitempty"`
}

// ExecLine is one line of an exec's NDJSON stream: output as it comes
// (Stream with Data, or DataB64 for bytes that are not UTF-8), then one
// line with the Result, or with an Error if the exec failed.
type ExecLine struct {
	// Stream is stdout or stderr on an output line.
	Stream  string       `json:"stream,omitempty" enum:"stdout,stderr"`
	Data    string       `json:"data,omitempty"`
	DataB64 string       `json:"data_b64,omitempty"`
	Result  *ExecResult  `json:"result,omitempty"`
	Error   *ErrorDetail `json:"error,omitempty"`
}

// ExecChunk is the data of an SSE stdout or stderr event: output as text,
// or as base64 when it is not UTF-8.
type ExecChunk struct {
	Data    string `json:"data,omitempty"`
	DataB64 string `json:"data_b64,omitempty"`
}

// --- shell

// ShellControl is a text message of a shell WebSocket (binary messages
// carry the terminal's bytes both ways). The client sends "resize" (rows,
// cols); the server sends "started" (exec_id, sandbox_id, replaced) first,
// "error" (message) for a control message it refused, and "exit"
// (exit_code, signal, ...) just before it closes.
type ShellControl struct {
	Type string `json:"type" enum:"resize,started,error,exit"`
	// Rows and Cols are the terminal's new size (resize).
	Rows uint16 `json:"rows,omitempty"`
	Cols uint16 `json:"cols,omitempty"`
	// ExecID, SandboxID and Replaced say where the session runs (started,
	// exit).
	ExecID    string `json:"exec_id,omitempty"`
	SandboxID string `json:"sandbox_id,omitempty"`
	Replaced  bool   `json:"replaced,omitempty"`
	// ExitCode, Signal, TimedOut, Canceled, Lost and DurationMS say how the
	// command ended (exit).
	ExitCode   *int  `json:"exit_code,omitempty"`
	Signal     int   `json:"signal,omitempty"`
	Canceled   bool  `json:"canceled,omitempty"`
	Lost       bool  `json:"lost,omitempty"`
	DurationMS int64 `json:"duration_ms,omitempty"`
	// Message explains an error.
	Message string `json:"message,omitempty"`
}
