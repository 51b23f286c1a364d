// Package gitx runs the git command for agentbox.
//
// Two trust levels exist. Mirror operations (clone, fetch) run with the
// daemon user's git configuration so that host credential helpers and ssh
// keys work; the mirror is never visible to a sandbox. Everything that
// touches a workspace runs Hardened: no system or global configuration, no
// hooks, no fsmonitor, no external diff or textconv, no network protocols,
// and never with a workspace-controlled git directory (callers point
// GIT_DIR at a host-private directory). Output is capped and every call
// takes a context that reaches the process.
package gitx

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"strings"
)

// Cmd describes one git invocation.
type Cmd struct {
	// Dir is the working directory.
	Dir string
	// Args are git's arguments.
	Args []string
	// Env adds variables (KEY=VALUE) to the base environment.
	Env []string
	// Stdin, if set, feeds the process.
	Stdin io.Reader
	// Stderr, if set, receives stderr as it arrives (progress).
	Stderr io.Writer
	// Hardened selects the workspace trust level (see package comment).
	Hardened bool
	// MaxOutput caps stdout; 0 means 64 MiB. Exceeding it is an error.
	MaxOutput int64
	// Redact lists strings removed from error messages (credentials).
	Redact []string
	// Jail, if set, runs git confined to the paths it lists (see Jail).
	// Every git that reads a tree a sandbox controls runs so.
	Jail *Jail
}

// ErrOutputTooLarge is returned when stdout exceeds Cmd.MaxOutput.
var ErrOutputTooLarge = errors.New("git output over the limit")

// hardenedConfig overrides every configuration key known to make git run a
// program or reach outside the repository. Command-line -c beats any file.
var hardenedConfig = []string{
	"core.hooksPath=/dev/null",
	"core.fsmonitor=false",
	"core.pager=cat",
	"core.editor=false",
	"core.askPass=",
	"core.sshCommand=false",
	"core.gitProxy=",
	"core.alternateRefsCommand=",
	"core.untrackedCache=false",
	"diff.external=",
	"credential.helper=",
	"commit.gpgSign=false",
	"tag.gpgSign=false",
	"gpg.program=false",
	"protocol.allow=never",
	"protocol.file.allow=never",
	"safe.directory=*",
	"advice.detachedHead=false",
	"init.defaultBranch=main",
	"gc.auto=0",
	"maintenance.auto=false",
}

// Run runs git and returns its stdout. Errors carry git's stderr, with the
// Redact strings removed.
func Run(ctx context.Context, c Cmd) ([]byte, error) {
	args := c.Args
	env := os.Environ()
	if c.Hardened {
		pre := make([]string, 0, 2*len(hardenedConfig)+len(args))
		for _, kv := range hardenedConfig {
			pre = append(pre, "-c", kv)
		}
		args = append(pre, args...)
		env = []string{
			"PATH=" + os.Getenv("PATH"),
			"HOME=/nonexistent",
			"LANG=C",
			"LC_ALL=C",
			"GIT_CONFIG_NOSYSTEM=1",
			"GIT_CONFIG_GLOBAL=/dev/null",
			"GIT_TERMINAL_PROMPT=0",
			"GIT_PROTOCOL_FROM_USER=0",
			"GIT_OPTIONAL_LOCKS=0",
		}
	} else {
		env = append(env, "GIT_TERMINAL_PROMPT=0", "LC_ALL=C")
	}
	env = append(env, c.Env...)

	cmd := exec.CommandContext(ctx, "git", args...)
	cmd.Dir = c.Dir
	if c.Jail != nil {
		name, jargs, err := c.Jail.command(c.Dir, args)
		if err != nil {
			return nil, err
		}
		cmd = exec.CommandContext(ctx, name, jargs...)
		cmd.Dir = "/"
	}
	cmd.Env = env
	cmd.Stdin = c.Stdin
	max := c.MaxOutput
	if max <= 0 {
		max = 64 << 20
	}
	out := &capped{max: max}
	var errBuf capped
	errBuf.max = 64 << 10
	cmd.Stdout = out
	if c.Stderr != nil {
		cmd.Stderr = io.MultiWriter(&errBuf, c.Stderr)
	} else {
		cmd.Stderr = &errBuf
	}
	if c.Jail != nil {
		// bubblewrap's --die-with-parent is PR_SET_PDEATHSIG, which fires
		// when the thread that forked it exits, not the process. Go ends
		// threads whose goroutine exits locked (internal/anonmount does
		// so on purpose), and any thread may have forked this one: hold
		// the forking thread until git is reaped.
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
	}
	err := cmd.Run()
	if out.over {
		return nil, fmt.Errorf("git %s: %w (%d bytes)", verb(c.Args), ErrOutputTooLarge, max)
	}
	if err != nil {
		if ctx.Err() != nil {
			return nil, fmt.Errorf("git %s: %w", verb(c.Args), ctx.Err())
		}
		msg := strings.TrimSpace(lastLines(errBuf.String(), 3))
		for _, r := range c.Redact {
			if r != "" {
				msg = strings.ReplaceAll(msg, r, "***")
			}
		}
		if msg == "" {
			msg = err.Error()
		}
		return nil, &runError{msg: fmt.Sprintf("git %s: %s", verb(c.Args), msg), err: err}
	}
	return out.Bytes(), nil
}

// runError is a git run that failed: its message is git's own last lines;
// it unwraps to the *exec.ExitError, for callers that read an exit code
// (merge-base --is-ancestor answers with one).
type runError struct {
	msg string
	err error
}

func (e *runError) Error() string { return e.msg }
func (e *runError) Unwrap() error { return e.err }

// ExitCode is the exit status of the git run that failed with err, or -1
// when err is not a git that ran and exited.
func ExitCode(err error) int {
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return ee.ExitCode()
	}
	return -1
}

// verb is the git subcommand, for error messages.
func verb(args []string) string {
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "-c" || a == "-C" || a == "--git-dir" || a == "--work-tree" {
			i++
			continue
		}
		if !strings.HasPrefix(a, "-") {
			return a
		}
	}
	return "command"
}

func lastLines(s string, n int) string {
	s = strings.ReplaceAll(s, "\r", "\n")
	lines := strings.Split(strings.TrimSpace(s), "\n")
	var keep []string
	for _, l := range lines {
		if strings.TrimSpace(l) != "" {
			keep = append(keep, l)
		}
	}
	if len(keep) > n {
		keep = keep[len(keep)-n:]
	}
	return strings.Join(keep, "; ")
}

// capped keeps at most max bytes and records overflow. The buffer is a
// named field, not embedded: an embedded bytes.Buffer would promote
// ReadFrom, and os/exec's io.Copy would use it and bypass the cap.
type capped struct {
	buf  bytes.Buffer
	max  int64
	over bool
}

func (c *capped) Write(p []byte) (int, error) {
	room := c.max - int64(c.buf.Len())
	if int64(len(p)) > room {
		c.over = true
		if room > 0 {
			c.buf.Write(p[:room])
		}
		return len(p), nil
	}
	return c.buf.Write(p)
}

func (c *capped) Bytes() []byte  { return c.buf.Bytes() }
func (c *capped) String() string { return c.buf.String() }
