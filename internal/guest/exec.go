package guest

import (
	"errors"
	"fmt"
	"path"
	"strings"
	"time"
)

const (
	// DefaultWorkdir is where a command runs when its request names no directory.
	DefaultWorkdir = "/workspace"
	// DefaultMaxOutputBytes caps each of stdout and stderr of a command when
	// its request sets no cap.
	DefaultMaxOutputBytes = 16 << 20
	// maxArgs bounds the number of argv and env entries of a request.
	maxArgs = 1 << 14
)

// TruncationMarker is what the guest appends to a stream that reached its
// cap, after exactly max bytes of the command's output.
func TruncationMarker(max int64) string {
	return fmt.Sprintf("\n[agentbox: output truncated after %d bytes]\n", max)
}

// ExecRequest is one command for the guest to run.
type ExecRequest struct {
	// Argv is the command and its arguments; Argv[0] is looked up in the
	// PATH of Env when it has no slash (in a default PATH when Env has none).
	Argv []string
	// Env is the command's whole environment, "KEY=value" entries passed as
	// given: nothing is inherited from the guest or the daemon.
	Env []string
	// Dir is the absolute working directory; empty means DefaultWorkdir.
	Dir string
	// Timeout, when positive, kills the command's whole process tree once it
	// has run this long, and the result says TimedOut.
	Timeout time.Duration
	// KillGrace, when positive, makes a timeout first send SIGTERM to every
	// process of the tree and SIGKILL only after this much more time.
	KillGrace time.Duration
	// MaxOutputBytes caps stdout and stderr each; 0 means DefaultMaxOutputBytes.
	// Past the cap the guest appends TruncationMarker and keeps reading and
	// dropping the command's output, so the command neither blocks on a full
	// pipe nor dies of the cap: it runs to its end or its timeout.
	MaxOutputBytes int64
	// TTY runs the command on a new pseudo-terminal as its controlling
	// terminal (stdin, stdout and stderr), in the foreground; all output
	// then arrives as stdout, and input is typed into the terminal. The
	// end of input (FrameStdinClose) types the terminal's EOF character
	// (^D) once, as a person would: a program reading a line gets end of
	// file; after a line without a newline it is typed twice, the first
	// delivering the line. A program that put the terminal in raw mode
	// gets the byte and decides what it means.
	TTY bool
	// Rows and Cols are the initial terminal size of a TTY (0: 24x80).
	Rows, Cols uint16
}

// Validate reports the first thing wrong with r, wrapping ErrInvalid.
func (r *ExecRequest) Validate() error {
	if len(r.Argv) == 0 || r.Argv[0] == "" {
		return fmt.Errorf("%w: empty command", ErrInvalid)
	}
	if len(r.Argv) > maxArgs || len(r.Env) > maxArgs {
		return fmt.Errorf("%w: more than %d arguments or variables", ErrInvalid, maxArgs)
	}
	for _, a := range r.Argv {
		if strings.IndexByte(a, 0) >= 0 {
			return fmt.Errorf("%w: argument %q contains a NUL byte", ErrInvalid, a)
		}
	}
	for _, e := range r.Env {
		k, _, ok := strings.Cut(e, "=")
		if !ok || k == "" || strings.IndexByte(e, 0) >= 0 {
			return fmt.Errorf("%w: environment entry %q is not KEY=value", ErrInvalid, e)
		}
	}
	if r.Dir != "" && (!path.IsAbs(r.Dir) || strings.IndexByte(r.Dir, 0) >= 0) {
		return fmt.Errorf("%w: working directory %q is not an absolute path", ErrInvalid, r.Dir)
	}
	if r.Timeout < 0 || r.KillGrace < 0 || r.MaxOutputBytes < 0 {
		return fmt.Errorf("%w: negative timeout, grace or output cap", ErrInvalid)
	}
	if n := len(EncodeExecRequest(r)); n > MaxFrameSize {
		return fmt.Errorf("%w: request of %d bytes exceeds %d", ErrInvalid, n, MaxFrameSize)
	}
	return nil
}

// OutputCap is the per-stream output cap that applies to r.
func (r *ExecRequest) OutputCap() int64 {
	if r.MaxOutputBytes == 0 {
		return DefaultMaxOutputBytes
	}
	return r.MaxOutputBytes
}

// Workdir is the directory the command runs in.
func (r *ExecRequest) Workdir() string {
	if r.Dir == "" {
		return DefaultWorkdir
	}
	return r.Dir
}

// ExecResult is how a command ended.
type ExecResult struct {
	// ExitCode is the command's exit status; 128+N when signal N killed it;
	// -1 when the status is unknown (Lost, or the exec's supervisor was
	// killed from inside the sandbox).
	ExitCode int
	// Signal is the signal that killed the command, or 0.
	Signal int
	// TimedOut says the command's Timeout expired and its tree was killed.
	TimedOut bool
	// Canceled says the caller killed the command (context or Kill).
	Canceled bool
	// Lost says the connection to the guest died before the command's
	// result arrived: its outcome is unknown. The guest kills the commands of
	// a connection it loses.
	Lost bool
	// StdoutTruncated and StderrTruncated say the stream reached its cap.
	StdoutTruncated, StderrTruncated bool
	// StdoutBytes and StderrBytes count what the command wrote, including
	// what was dropped past the cap.
	StdoutBytes, StderrBytes int64
	// Duration is the command's wall time as the guest measured it (as the
	// daemon measured it when Lost).
	Duration time.Duration
	// UserCPU and SysCPU are the CPU time of the command's whole process
	// tree: the sum of the resource usage of every process of it that was
	// waited for (by the guest's reaper, or by a parent in the tree, whose
	// usage then includes it). A process still unwaited when it was
	// killed counts too, since the reaper waits for it. Zero when the
	// guest did not report usage (Lost, or a guest from before usage).
	UserCPU, SysCPU time.Duration
	// PeakMemBytes is the largest resident set size any single process of
	// the tree reached (ru_maxrss), not the sum over processes that ran
	// at the same time: the sandbox's memory cgroup reports that. Zero
	// when unknown.
	PeakMemBytes int64
}

// CPU is the command tree's CPU time, user and system.
func (r ExecResult) CPU() time.Duration { return r.UserCPU + r.SysCPU }

// ErrInvalid classifies a request the guest will not run.
var ErrInvalid = errors.New("invalid exec request")

// ErrClosed says the connection to the guest is gone.
var ErrClosed = errors.New("guest connection closed")

// ErrNotSent, with ErrClosed, says that the connection closed before the
// guest confirmed the command's start: its request never went out, or went
// to a guest that was dying (which kills the commands of a connection it
// loses). None of its input was read. The manager runs such a command in
// a new sandbox.
var ErrNotSent = errors.New("the command was not sent")

// ErrorKind classifies a FrameError.
type ErrorKind uint8

// The error kinds.
const (
	ErrKindProtocol ErrorKind = 1 + iota // the peer broke the protocol
	ErrKindAuth                          // the guest's token was refused
	ErrKindNotFound                      // the command's executable does not exist
	ErrKindStart                         // the command could not start for another reason
	ErrKindLimit                         // too many concurrent commands
	ErrKindInvalid                       // the request is malformed
	ErrKindInternal                      // the guest failed
)

// StartError says the command never ran. ExitCode gives the status a shell
// would report for it.
type StartError struct {
	Argv0  string
	Kind   ErrorKind
	Reason string
}

func (e *StartError) Error() string {
	return fmt.Sprintf("starting %q: %s", e.Argv0, e.Reason)
}

// ExitCode is 127 for a command that does not exist, 126 otherwise.
func (e *StartError) ExitCode() int {
	if e.Kind == ErrKindNotFound {
		return 127
	}
	return 126
}

// Unwrap makes a malformed request match ErrInvalid.
func (e *StartError) Unwrap() error {
	if e.Kind == ErrKindInvalid {
		return ErrInvalid
	}
	return nil
}
