package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/agentbox/agentbox/client"
	"github.com/agentbox/agentbox/internal/errdefs"
)

// isTerminal reports whether f is an *os.File on a terminal.
func isTerminal(f any) bool {
	file, ok := f.(*os.File)
	return ok && term.IsTerminal(int(file.Fd()))
}

func (c *cli) shellCmd() *cobra.Command {
	var opts client.Shell
	var forceTTY, noTTY bool
	cmd := &cobra.Command{
		Use:   "shell WS|SANDBOX [--env K=V]... [--workdir DIR] [-t|-T] [-- CMD ARGS...]",
		Short: "Open an interactive shell in a workspace's sandbox; exits with its status",
		Long: "Open an interactive command (default /bin/sh) on a terminal in a workspace's sandbox, " +
			"with the local terminal in raw mode and its size kept in step. Exits with the command's status.\n\n" +
			"As with ssh, a terminal is allocated only when stdin is one: with a pipe the command reads " +
			"the pipe to its end (`echo 'ls; exit 3' | agentbox shell WS`). -t allocates one anyway " +
			"(the end of the pipe is typed as ^D), -T never does. Nothing of the local environment " +
			"is passed but TERM (on a terminal) and --env.",
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if forceTTY && noTTY {
				return errdefs.Invalid("shell: -t and -T exclude each other")
			}
			opts.Argv = args[1:]
			if len(opts.Argv) == 0 {
				opts.Argv = []string{"/bin/sh"}
			}
			if noTTY || (!forceTTY && !isTerminal(c.stdin)) {
				return c.runExec(cmd, args[0], client.Exec{Argv: opts.Argv, Env: opts.Env, Workdir: opts.Workdir}, c.stdin)
			}
			return c.runShell(cmd.Context(), args[0], opts)
		},
	}
	fl := cmd.Flags()
	fl.StringArrayVar(&opts.Env, "env", nil, "KEY=VALUE (repeatable); nothing else is inherited but TERM")
	fl.StringVar(&opts.Workdir, "workdir", "", "working directory (default /workspace)")
	fl.BoolVarP(&forceTTY, "tty", "t", false, "allocate a terminal even when stdin is not one")
	fl.BoolVarP(&noTTY, "no-tty", "T", false, "never allocate a terminal (stdin streams to the command)")
	return cmd
}

// runShell runs opts on a terminal in target, wired to the local one.
func (c *cli) runShell(ctx context.Context, target string, opts client.Shell) error {
	if t := os.Getenv("TERM"); t != "" && !hasEnv(opts.Env, "TERM") {
		opts.Env = append(opts.Env, "TERM="+t)
	}
	sizeFd := -1
	for _, f := range []any{c.stdout, c.stdin} {
		if isTerminal(f) {
			sizeFd = int(f.(*os.File).Fd())
			break
		}
	}
	if sizeFd >= 0 {
		if cols, rows, err := term.GetSize(sizeFd); err == nil && rows > 0 && cols > 0 {
			opts.Rows, opts.Cols = uint16(rows), uint16(cols)
		}
	}
	cl, err := c.client()
	if err != nil {
		return err
	}
	sess, err := cl.Shell(ctx, target, opts)
	if err != nil {
		return err
	}
	defer sess.Close()
	if sess.Replaced {
		fmt.Fprintf(c.stderr, "agentbox: the workspace's sandbox was gone; started a new one (%s)\n", sess.SandboxID)
	}
	// A signal to agentbox itself (SIGTERM, or SIGINT when not raw) ends
	// the session; Close kills the remote command.
	stopClose := context.AfterFunc(ctx, func() { sess.Close() })
	defer stopClose()

	if isTerminal(c.stdin) {
		fd := int(c.stdin.(*os.File).Fd())
		old, err := term.MakeRaw(fd)
		if err != nil {
			return fmt.Errorf("putting the terminal in raw mode: %w", err)
		}
		defer term.Restore(fd, old)
	}
	if sizeFd >= 0 {
		winch := make(chan os.Signal, 1)
		signal.Notify(winch, syscall.SIGWINCH)
		defer func() {
			signal.Stop(winch)
			close(winch)
		}()
		go func() {
			for range winch {
				if cols, rows, err := term.GetSize(sizeFd); err == nil && rows > 0 && cols > 0 {
					sess.Resize(uint16(rows), uint16(cols))
				}
			}
		}()
	}
	// The stdin copier may stay blocked on a terminal read after the
	// session ends; the process exits right after.
	ended := make(chan struct{})
	go c.typeInto(sess, isTerminal(c.stdin), ended)
	io.Copy(c.stdout, sess)
	close(ended)
	exit, err := sess.Wait(context.Background())
	if err != nil {
		if ctx.Err() != nil {
			return fmt.Errorf("shell in %s: interrupted", target)
		}
		return err
	}
	if exit.Message != "" {
		fmt.Fprintf(c.stderr, "agentbox: %s\r\n", exit.Message)
	}
	switch {
	case exit.Lost:
		fmt.Fprintf(c.stderr, "agentbox: the sandbox died during the session (exec %s lost)\r\n", exit.ExecID)
		return exitError{code: 255}
	case exit.ExitCode != 0:
		return exitError{code: exit.ExitCode}
	}
	return nil
}

// typeInto copies stdin to the terminal. A terminal's own ^D ends the
// remote input. The end of a pipe is typed as ^D, again every eofRepeat
// until the session ends: a closed pipe gives every read an end of file,
// and a terminal gives one per ^D (a ^D typed while the remote program
// switches the terminal's mode can also be lost).
func (c *cli) typeInto(sess *client.ShellSession, tty bool, ended <-chan struct{}) {
	buf := make([]byte, 32<<10)
	for {
		n, err := c.stdin.Read(buf)
		if n > 0 {
			if _, werr := sess.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			break
		}
	}
	if tty {
		return
	}
	t := time.NewTicker(eofRepeat)
	defer t.Stop()
	for {
		if _, err := sess.Write([]byte{4}); err != nil {
			return
		}
		select {
		case <-ended:
			return
		case <-t.C:
		}
	}
}

// eofRepeat is how often the end of a piped input is typed again.
const eofRepeat = 200 * time.Millisecond

func hasEnv(env []string, key string) bool {
	for _, kv := range env {
		if len(kv) > len(key) && kv[:len(key)+1] == key+"=" {
			return true
		}
	}
	return false
}
