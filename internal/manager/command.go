package manager

import (
	"context"
	"encoding/base64"
	"fmt"
	"io"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/agentbox/agentbox/internal/apitypes"
	"github.com/agentbox/agentbox/internal/errdefs"
	"github.com/agentbox/agentbox/internal/guest"
	"github.com/agentbox/agentbox/internal/ids"
)

// Bounds of exec requests as the API takes them.
const (
	// MaxStdinField caps the stdin field of a one-document exec request.
	MaxStdinField = 16 << 20
	// DefaultBufferedOutput caps each of stdout and stderr of a buffered
	// exec whose request names no cap; MaxBufferedOutput is the most a
	// buffered exec may ask for (the stream has no such bound).
	DefaultBufferedOutput = 1 << 20
	MaxBufferedOutput     = 16 << 20
	// DefaultCols and DefaultRows are the size of a terminal whose request
	// names none; MaxTerminalSize bounds each of its columns and rows.
	DefaultCols, DefaultRows = 80, 24
	MaxTerminalSize          = 1000
	// DefaultTERM is the TERM of a command on a terminal when neither the
	// image, the policy nor the request sets one.
	DefaultTERM = "xterm-256color"
)

// Command checks an exec request as the API (and the MCP server) take it
// and turns it into the command the guest runs: Sh becomes sh -c SH, the
// timeout a duration.
func Command(req apitypes.ExecRequest) (guest.ExecRequest, error) {
	argv := req.Argv
	switch {
	case req.Sh != "" && len(req.Argv) > 0:
		return guest.ExecRequest{}, errdefs.Invalid("exec request: give argv or sh, not both")
	case req.Sh != "":
		argv = []string{"sh", "-c", req.Sh}
	case len(argv) == 0 || argv[0] == "":
		return guest.ExecRequest{}, errdefs.Invalid("exec request: the command is empty (give argv or sh)")
	}
	if len(req.Stdin) > MaxStdinField {
		return guest.ExecRequest{}, errdefs.Invalid("exec request: stdin over 16 MiB (stream it instead)")
	}
	if req.MaxOutputBytes < 0 {
		return guest.ExecRequest{}, errdefs.Invalid("exec request: max_output_bytes %d is negative", req.MaxOutputBytes)
	}
	for _, kv := range req.Env {
		if k, _, ok := strings.Cut(kv, "="); !ok || k == "" {
			return guest.ExecRequest{}, errdefs.Invalid("env entry %q is not KEY=VALUE", kv)
		}
	}
	greq := guest.ExecRequest{Argv: argv, Env: req.Env, Dir: req.Workdir, MaxOutputBytes: req.MaxOutputBytes}
	switch {
	case req.TTY:
		cols, rows, err := terminalSize(req.Cols, req.Rows, true)
		if err != nil {
			return greq, err
		}
		greq.TTY, greq.Cols, greq.Rows = true, uint16(cols), uint16(rows)
	case req.Cols != 0 || req.Rows != 0:
		return greq, errdefs.Invalid("exec request: cols and rows size a terminal: set tty too")
	}
	if req.Timeout != "" {
		d, err := time.ParseDuration(req.Timeout)
		if err != nil || d <= 0 {
			return greq, errdefs.Invalid("exec request: timeout %q is not a positive duration like 30s", req.Timeout)
		}
		greq.Timeout = d
	}
	return greq, nil
}

// terminalSize checks a terminal's size; with defaults, 0 stands for
// DefaultCols or DefaultRows.
func terminalSize(cols, rows int, defaults bool) (int, int, error) {
	if defaults {
		if cols == 0 {
			cols = DefaultCols
		}
		if rows == 0 {
			rows = DefaultRows
		}
	}
	if cols < 1 || cols > MaxTerminalSize || rows < 1 || rows > MaxTerminalSize {
		return 0, 0, errdefs.Invalid("terminal size %d columns by %d rows: each must be 1 to %d", cols, rows, MaxTerminalSize)
	}
	return cols, rows, nil
}

// ExecTarget checks that target names a workspace or a sandbox that
// exists, and returns its workspace's ID. An empty, unknown or removed
// target is ErrNotFound naming it.
func (m *Manager) ExecTarget(ctx context.Context, target string) (string, error) {
	wsID, err := m.targetWorkspace(ctx, target)
	if err != nil {
		return "", err
	}
	if _, err := m.GetWorkspace(ctx, wsID); err != nil {
		return "", err
	}
	return wsID, nil
}

// ExecBuffered runs req in the sandbox of target as Exec does and returns
// its whole output in one reply. Each stream keeps at most
// req.MaxOutputBytes (default 1 MiB, at most 16 MiB; less if the
// sandbox's policy says so): past it the command runs on, its output is
// dropped, and the reply says Truncated. stdin, when not nil, is the
// command's input instead of req.Stdin.
func (m *Manager) ExecBuffered(ctx context.Context, target string, req apitypes.ExecRequest, stdin io.Reader) (apitypes.ExecOutput, error) {
	switch {
	case req.MaxOutputBytes > MaxBufferedOutput:
		return apitypes.ExecOutput{}, errdefs.Invalid("exec request: max_output_bytes %d is over the %d bytes a buffered exec keeps (stream the output instead)", req.MaxOutputBytes, MaxBufferedOutput)
	case req.MaxOutputBytes == 0:
		req.MaxOutputBytes = DefaultBufferedOutput
	}
	greq, err := Command(req)
	if err != nil {
		return apitypes.ExecOutput{}, err
	}
	if stdin == nil {
		stdin = strings.NewReader(req.Stdin)
	}
	// The guest stops each stream at the cap and adds its note; the
	// buffers hold that and no more, whatever arrives.
	limit := req.MaxOutputBytes + int64(len(guest.TruncationMarker(req.MaxOutputBytes)))
	stdout, stderr := &capBuffer{max: limit}, &capBuffer{max: limit}
	out, err := m.Exec(ctx, target, greq, stdin, stdout, stderr)
	if err != nil {
		return apitypes.ExecOutput{}, err
	}
	return out.Output(stdout.b, stderr.b), nil
}

// Result is the API's view of how a command ended.
func (o ExecOutcome) Result() apitypes.ExecResult {
	return apitypes.ExecResult{
		ExecID: o.ExecID, SandboxID: o.SandboxID, Replaced: o.Replaced,
		ExitCode: o.ExitCode, Signal: o.Signal, TimedOut: o.TimedOut, Canceled: o.Canceled, OOM: o.OOMKilled, Lost: o.Lost,
		StdoutTruncated: o.StdoutTruncated, StderrTruncated: o.StderrTruncated,
		StdoutBytes: o.StdoutBytes, StderrBytes: o.StderrBytes, DurationMS: o.Duration.Milliseconds(),
		CPUNanos: int64(o.CPU()), PeakMemBytes: o.PeakMemBytes,
	}
}

// Output is the one-document reply of a buffered exec that ended as o
// and wrote stdout and stderr.
func (o ExecOutcome) Output(stdout, stderr []byte) apitypes.ExecOutput {
	r := o.Result()
	out := apitypes.ExecOutput{
		ExitCode: r.ExitCode, Signal: r.Signal, TimedOut: r.TimedOut, OOM: r.OOM,
		Truncated: r.StdoutTruncated || r.StderrTruncated, DurationMS: r.DurationMS,
		ExecID: r.ExecID, SandboxID: r.SandboxID, Replaced: r.Replaced, Canceled: r.Canceled, Lost: r.Lost,
		StdoutTruncated: r.StdoutTruncated, StderrTruncated: r.StderrTruncated,
		StdoutBytes: r.StdoutBytes, StderrBytes: r.StderrBytes, CPUNanos: r.CPUNanos, PeakMemBytes: r.PeakMemBytes,
	}
	out.Stdout, out.StdoutB64 = textOf(stdout)
	out.Stderr, out.StderrB64 = textOf(stderr)
	return out
}

// textOf is b as text, and as base64 too when it is not valid UTF-8
// (the text then has U+FFFD for the invalid bytes).
func textOf(b []byte) (string, string) {
	if utf8.Valid(b) {
		return string(b), ""
	}
	return strings.ToValidUTF8(string(b), "\uFFFD"), base64.StdEncoding.EncodeToString(b)
}

// capBuffer keeps the first max bytes written to it and drops the rest,
// never failing the writer.
type capBuffer struct {
	b   []byte
	max int64
}

func (c *capBuffer) Write(p []byte) (int, error) {
	if room := c.max - int64(len(c.b)); room > 0 {
		c.b = append(c.b, p[:min(int64(len(p)), room)]...)
	}
	return len(p), nil
}

// targetWorkspace resolves an exec target (a workspace or sandbox ID) to
// its workspace ID.
func (m *Manager) targetWorkspace(ctx context.Context, target string) (string, error) {
	if strings.TrimSpace(target) == "" {
		return "", fmt.Errorf("workspace or sandbox %q %w", target, errdefs.ErrNotFound)
	}
	if !ids.HasPrefix(target, "sb") {
		return target, nil
	}
	sb, err := m.GetSandbox(ctx, target)
	if err != nil {
		return "", err
	}
	return sb.WorkspaceID, nil
}
