package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/agentbox/agentbox/client"
	"github.com/agentbox/agentbox/internal/errdefs"
	"github.com/agentbox/agentbox/internal/policy"
)

func (c *cli) sandboxCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "sandbox", Aliases: []string{"sb"}, Short: "Disposable execution environments on workspaces"}
	cmd.AddCommand(c.sandboxCreateCmd(), c.sandboxLsCmd(), c.sandboxShowCmd(), c.sandboxStopCmd(), c.sandboxRmCmd())
	return cmd
}

// parseSize reads 512M, 2G, 1048576.
func parseSize(s string) (int64, error) {
	if s == "" {
		return 0, nil
	}
	mult := int64(1)
	switch strings.ToUpper(s[len(s)-1:]) {
	case "K":
		mult = 1 << 10
	case "M":
		mult = 1 << 20
	case "G":
		mult = 1 << 30
	}
	num := s
	if mult > 1 {
		num = s[:len(s)-1]
	}
	var n int64
	if _, err := fmt.Sscanf(num, "%d", &n); err != nil || n < 0 || fmt.Sprint(n) != num {
		return 0, errdefs.Invalid("size %q is not a number with an optional K, M or G", s)
	}
	return n * mult, nil
}

func (c *cli) sandboxCreateCmd() *cobra.Command {
	var req client.CreateSandbox
	var memory, tmp, policyFile string
	var allow []string
	cmd := &cobra.Command{
		Use:   "create --ws WS [--backend docker|gvisor|local|kubernetes] [--image IMG] [--cpus N] [--memory SIZE] [--pids N] [--policy FILE] [--allow HOST[:PORT]]...",
		Short: "Start a sandbox with the workspace mounted at /workspace",
		Long: `Start a sandbox with the workspace mounted at /workspace.

By default a sandbox has no network at all. --policy FILE attaches a policy
document (JSON or YAML; see "agentbox policy check"); --allow adds hosts the
sandbox may reach through the egress proxy (host, host:port or *.domain).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			var err error
			if req.Limits.MemoryBytes, err = parseSize(memory); err != nil {
				return err
			}
			if req.Limits.TmpBytes, err = parseSize(tmp); err != nil {
				return err
			}
			if req.Policy, err = c.sandboxPolicy(policyFile, allow); err != nil {
				return err
			}
			cl, err := c.client()
			if err != nil {
				return err
			}
			sb, err := cl.CreateSandbox(cmd.Context(), req)
			if err != nil {
				return err
			}
			return c.emit(sb, func(w io.Writer) {
				fmt.Fprintf(w, "created %s on %s (%s, %s)\n", sb.ID, sb.WorkspaceID, sb.Backend, sb.Image)
			})
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&req.Workspace, "ws", "", "workspace ID (required)")
	fl.StringVar(&req.Backend, "backend", "", "docker, gvisor, local or kubernetes (default: the daemon's)")
	fl.StringVar(&req.Image, "image", "", "image: a name in the engine, or oci:DIR[:TAG], oci-archive:FILE[:TAG], docker-archive:FILE (a path on the daemon's host); default: the daemon's")
	fl.Float64Var(&req.Limits.CPUs, "cpus", 0, "CPU quota in cores")
	fl.StringVar(&memory, "memory", "", "memory limit, e.g. 512M or 2G (no swap)")
	fl.Int64Var(&req.Limits.Pids, "pids", 0, "process limit")
	fl.StringVar(&tmp, "tmp", "", "/tmp size, e.g. 256M")
	fl.StringVar(&req.Lifetime, "timeout", "", "stop the sandbox after this long, e.g. 2h")
	fl.StringVar(&policyFile, "policy", "", `policy document, JSON or YAML ("-": stdin)`)
	fl.StringArrayVar(&allow, "allow", nil, "a host the sandbox may reach: host, host:port or *.domain (repeatable)")
	cmd.MarkFlagRequired("ws")
	return cmd
}

// sandboxPolicy reads a policy file, adds the --allow hosts, and checks the
// result here, so that a mistake is reported with its field before
// anything is asked of the daemon. It returns the canonical policy as JSON,
// or nil for none.
func (c *cli) sandboxPolicy(file string, allow []string) (json.RawMessage, error) {
	if file == "" && len(allow) == 0 {
		return nil, nil
	}
	var p policy.Policy
	if file != "" {
		data, err := c.readArg(file)
		if err != nil {
			return nil, err
		}
		if p, err = policy.Parse(data); err != nil {
			return nil, fmt.Errorf("policy %s: %w", file, err)
		}
	}
	if len(allow) > 0 {
		p.Network.Mode = policy.ModeAllowlist
		p.Network.Allow = append(p.Network.Allow, allow...)
		b, err := json.Marshal(p)
		if err != nil {
			return nil, err
		}
		if p, err = policy.Parse(b); err != nil {
			return nil, fmt.Errorf("--allow: %w", err)
		}
	}
	return json.Marshal(p)
}

// readArg reads a file named on the command line, "-" being stdin.
func (c *cli) readArg(name string) ([]byte, error) {
	if name == "-" {
		return io.ReadAll(io.LimitReader(c.stdin, policy.MaxDocumentBytes+1))
	}
	return os.ReadFile(name)
}

func (c *cli) sandboxLsCmd() *cobra.Command {
	var ws string
	cmd := &cobra.Command{
		Use:   "ls",
		Short: "List sandboxes",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, err := c.client()
			if err != nil {
				return err
			}
			sbs, err := cl.ListSandboxes(cmd.Context(), ws)
			if err != nil {
				return err
			}
			return c.emit(map[string]any{"sandboxes": sbs}, func(w io.Writer) {
				tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
				fmt.Fprintln(tw, "ID\tWORKSPACE\tBACKEND\tIMAGE\tSTATE\tLAST ACTIVITY")
				for _, sb := range sbs {
					fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", sb.ID, sb.WorkspaceID, sb.Backend, sb.Image, sb.State, sb.LastActivityAt.Local().Format(time.DateTime))
				}
				tw.Flush()
			})
		},
	}
	cmd.Flags().StringVar(&ws, "ws", "", "only sandboxes of this workspace")
	return cmd
}

func (c *cli) sandboxShowCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "show SANDBOX",
		Short: "Show a sandbox",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, err := c.client()
			if err != nil {
				return err
			}
			sb, err := cl.GetSandbox(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			return c.emit(sb, func(w io.Writer) {
				fmt.Fprintf(w, "id\t%s\nworkspace\t%s\nbackend\t%s (%s)\nimage\t%s\nstate\t%s\nspec\t%s\n", sb.ID, sb.WorkspaceID, sb.Backend, sb.BackendRef, sb.Image, sb.State, sb.Spec)
			})
		},
	}
}

func (c *cli) sandboxStopCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "stop SANDBOX",
		Short: "Stop a sandbox (the workspace stays; the next exec starts a new one)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, err := c.client()
			if err != nil {
				return err
			}
			sb, err := cl.StopSandbox(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			return c.emit(sb, func(w io.Writer) { fmt.Fprintf(w, "stopped %s\n", sb.ID) })
		},
	}
}

func (c *cli) sandboxRmCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "rm SANDBOX",
		Short: "Remove a sandbox",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, err := c.client()
			if err != nil {
				return err
			}
			if err := cl.RemoveSandbox(cmd.Context(), args[0]); err != nil {
				return err
			}
			return c.emit(map[string]any{"id": args[0], "removed": true}, func(w io.Writer) { fmt.Fprintf(w, "removed %s\n", args[0]) })
		},
	}
}

func (c *cli) execCmd() *cobra.Command {
	var req client.Exec
	var noStdin, detach bool
	cmd := &cobra.Command{
		Use:   "exec WS|SANDBOX [--detach] [--tty [--cols N --rows N]] [--timeout DUR] [--env K=V]... [--workdir DIR] [-n] (-- CMD ARGS... | --sh 'COMMAND LINE')",
		Short: "Run a command in a workspace's sandbox; exits with the command's status",
		Long: "Run a command in a workspace's sandbox; exits with the command's status.\n\n" +
			"The command is argv after --, run without a shell, or a shell command line with --sh, run as sh -c. " +
			"Its output streams as it comes; with --json the command runs to its end and one document carries " +
			"its output (stdout, stderr, each within --max-output, default 1 MiB, at most 16 MiB) and how it ended " +
			"(exit_code, signal, timed_out, oom, truncated, duration_ms).\n\n" +
			"When agentbox's stdin is not a terminal (a pipe or a file), it streams to the command, " +
			"which sees its end: `echo hi | agentbox exec WS -- cat` prints hi. -n gives the command no input.\n\n" +
			"--detach starts the command in the background and prints its process ID (--json: {\"id\": ...}): it runs " +
			"on until it exits, is killed or its sandbox stops; its input comes from agentbox stdin, not from agentbox's own. " +
			"See agentbox ps, logs, kill, stdin, wait and port.\n\n" +
			"--tty runs the command on a terminal of its own (--cols x --rows, default 80x24): everything it shows " +
			"is its stdout, input is typed into the terminal, and the end of input types ^D; TERM is xterm-256color " +
			"unless set. With --detach, agentbox resize changes the terminal's size. (agentbox shell is the " +
			"interactive form, attached to your own terminal.)",
		Args: func(cmd *cobra.Command, args []string) error {
			switch {
			case len(args) == 0:
				return fmt.Errorf("missing the workspace or sandbox to run in")
			case req.Sh != "" && len(args) > 1:
				return fmt.Errorf("give the command with --sh or after --, not both")
			case req.Sh == "" && len(args) < 2:
				return fmt.Errorf("missing the command: give it after -- or as --sh 'COMMAND LINE'")
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			req.Argv = args[1:]
			if !req.TTY && (cmd.Flags().Changed("cols") || cmd.Flags().Changed("rows")) {
				return fmt.Errorf("exec: --cols and --rows size a terminal: give --tty too: %w", client.ErrInvalid)
			}
			var stdin io.Reader
			if !noStdin && !isTerminal(c.stdin) {
				stdin = c.stdin
			}
			if detach {
				return c.runDetached(cmd, args[0], req)
			}
			return c.runExec(cmd, args[0], req, stdin)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&req.Sh, "sh", "", "run this shell command line (sh -c) instead of a command after --")
	fl.StringVar(&req.Timeout, "timeout", "", "kill the command's whole process tree after this long, e.g. 30s")
	fl.StringArrayVar(&req.Env, "env", nil, "KEY=VALUE (repeatable); nothing else is inherited")
	fl.StringVar(&req.Workdir, "workdir", "", "working directory (default /workspace)")
	fl.Int64Var(&req.MaxOutputBytes, "max-output", 0, "cap stdout and stderr each at this many bytes")
	fl.BoolVarP(&noStdin, "no-stdin", "n", false, "do not send agentbox's stdin to the command (it reads end of file)")
	fl.BoolVarP(&detach, "detach", "d", false, "run the command in the background and print its process ID")
	fl.BoolVarP(&req.TTY, "tty", "t", false, "run the command on a terminal of its own (all its output is stdout)")
	fl.IntVar(&req.Cols, "cols", 0, "the terminal's columns with --tty (default 80)")
	fl.IntVar(&req.Rows, "rows", 0, "the terminal's rows with --tty (default 24)")
	return cmd
}

// execDoc is what exec --json prints: the buffered reply, the exec's ID
// and, as before, the result alone.
type execDoc struct {
	ID string `json:"id"`
	client.ExecOutput
	Result client.ExecResult `json:"result"`
}

// runExec runs req in target, streaming stdin to it when not nil, and
// returns the command's status as an exitError.
func (c *cli) runExec(cmd *cobra.Command, target string, req client.Exec, stdin io.Reader) error {
	cl, err := c.client()
	if err != nil {
		return err
	}
	var res client.ExecResult
	switch {
	case c.json:
		out, err := cl.ExecBuffered(cmd.Context(), target, req, stdin)
		if err != nil {
			return err
		}
		res = out.Result()
		if err := c.emit(execDoc{ID: out.ExecID, ExecOutput: out, Result: res}, nil); err != nil {
			return err
		}
	case stdin != nil:
		res, err = cl.ExecStdin(cmd.Context(), target, req, stdin, c.stdout, c.stderr)
	default:
		res, err = cl.Exec(cmd.Context(), target, req, c.stdout, c.stderr)
	}
	if err != nil {
		return err
	}
	if !c.json && res.Replaced {
		fmt.Fprintf(c.stderr, "agentbox: the workspace's sandbox was gone; ran in a new one (%s)\n", res.SandboxID)
	}
	switch {
	case res.Lost:
		fmt.Fprintf(c.stderr, "agentbox: the sandbox died during the command (exec %s lost)\n", res.ExecID)
		return exitError{code: 255}
	case res.TimedOut:
		fmt.Fprintf(c.stderr, "agentbox: command timed out after %s; its process tree was killed\n", req.Timeout)
		return exitError{code: 124}
	case res.ExitCode != 0:
		return exitError{code: res.ExitCode}
	}
	return nil
}
