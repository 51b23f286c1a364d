package main

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/agentbox/agentbox/client"
)

// Background processes and ports: exec --detach, ps, logs, kill, stdin,
// resize, wait, port.

// runDetached starts req in target as a background process and prints
// its ID (--json: the process, whose "id" is that ID). agentbox's own
// stdin is not read (a pipe that never ends would hold the call): input
// goes through agentbox stdin.
func (c *cli) runDetached(cmd *cobra.Command, target string, req client.Exec) error {
	cl, err := c.client()
	if err != nil {
		return err
	}
	p, err := cl.StartProcess(cmd.Context(), target, req)
	if err != nil {
		return err
	}
	if !c.json && p.Replaced {
		fmt.Fprintf(c.stderr, "agentbox: the workspace's sandbox was gone; started in a new one (%s)\n", p.SandboxID)
	}
	return c.emit(p, func(w io.Writer) { fmt.Fprintln(w, p.ID) })
}

func (c *cli) psCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "ps WS|SANDBOX",
		Short: "List a workspace's background processes (exec --detach), running and recently ended",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, err := c.client()
			if err != nil {
				return err
			}
			ps, err := cl.ListProcesses(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			return c.emit(map[string]any{"processes": ps}, func(w io.Writer) {
				tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
				fmt.Fprintln(tw, "ID\tSTATE\tEXIT\tPID\tSTARTED\tOUTPUT\tCOMMAND")
				for _, p := range ps {
					exit := ""
					switch {
					case p.State == "running":
					case p.Signal != 0:
						exit = "sig " + strconv.Itoa(p.Signal)
					default:
						exit = strconv.Itoa(p.ExitCode)
					}
					fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%d/%d\t%s\n", p.ID, p.State, exit, p.Pid,
						p.StartedAt.Local().Format(time.DateTime), p.StdoutBytes, p.StderrBytes, commandLine(p.Argv))
				}
				tw.Flush()
			})
		},
	}
}

// commandLine shows argv on one line, shortened.
func commandLine(argv []string) string {
	s := strings.Join(argv, " ")
	s = strings.Map(func(r rune) rune {
		if r < ' ' {
			return ' '
		}
		return r
	}, s)
	if len(s) > 60 {
		s = s[:57] + "..."
	}
	return s
}

func (c *cli) logsCmd() *cobra.Command {
	var follow bool
	var stream string
	var offset, tail int64
	cmd := &cobra.Command{
		Use:   "logs WS|SANDBOX PROC [--follow] [--stream stdout|stderr|both] [--offset N | --tail N]",
		Short: "Print a background process's output, from an offset; --follow streams it until the process ends",
		Long: "Print a background process's output: stdout to stdout and stderr to stderr.\n\n" +
			"The daemon keeps the last 1 MiB of each stream; output older than that is gone, and agentbox " +
			"says how many bytes were dropped (on stderr; in the JSON, \"dropped\"). --offset starts at a byte " +
			"offset of the stream (the JSON's next_offset continues a read), --tail N prints the last N bytes. " +
			"With --follow it prints output as it comes until the process ends (with --json: one NDJSON line " +
			"per chunk, the last carrying the ended process).",
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			var streams []string
			switch stream {
			case "both", "":
				streams = []string{"stdout", "stderr"}
			case "stdout", "stderr":
				streams = []string{stream}
			default:
				return fmt.Errorf("logs: --stream %q is not stdout, stderr or both: %w", stream, client.ErrInvalid)
			}
			if tail > 0 {
				if offset != 0 {
					return fmt.Errorf("logs: give --offset or --tail, not both: %w", client.ErrInvalid)
				}
				offset = -tail
			}
			cl, err := c.client()
			if err != nil {
				return err
			}
			if follow {
				return c.followLogs(cmd.Context(), cl, args[0], args[1], streams, offset)
			}
			doc := map[string]client.ProcessLogs{}
			for _, s := range streams {
				l, err := cl.ProcessLogs(cmd.Context(), args[0], args[1], client.LogOptions{Stream: s, Offset: offset})
				if err != nil {
					return err
				}
				doc[s] = l
			}
			return c.emit(doc, func(w io.Writer) {
				for _, s := range streams {
					l := doc[s]
					if l.Dropped > 0 {
						fmt.Fprintf(c.stderr, "agentbox: %d bytes of %s before offset %d fell out of the daemon's ring\n", l.Dropped, s, l.Offset)
					}
					out := c.stdout
					if s == "stderr" {
						out = c.stderr
					}
					out.Write(l.Bytes())
				}
			})
		},
	}
	fl := cmd.Flags()
	fl.BoolVarP(&follow, "follow", "f", false, "print output as it comes until the process ends")
	fl.StringVar(&stream, "stream", "both", "stdout, stderr or both")
	fl.Int64Var(&offset, "offset", 0, "start at this byte offset of each stream (negative: from the end)")
	fl.Int64Var(&tail, "tail", 0, "print only the last N bytes of each stream")
	return cmd
}

// followLogs streams the chosen streams of a process at once until it
// ends.
func (c *cli) followLogs(ctx context.Context, cl *client.Client, target, id string, streams []string, offset int64) error {
	var mu sync.Mutex
	errs := make(chan error, len(streams))
	var last client.Process
	for _, s := range streams {
		go func() {
			p, err := cl.FollowProcessLogs(ctx, target, id, client.LogOptions{Stream: s, Offset: offset}, func(l client.ProcessLogs) error {
				mu.Lock()
				defer mu.Unlock()
				if c.json {
					c.emitLine(l)
					return nil
				}
				if l.Dropped > 0 {
					fmt.Fprintf(c.stderr, "agentbox: %d bytes of %s fell out of the daemon's ring\n", l.Dropped, s)
				}
				out := c.stdout
				if s == "stderr" {
					out = c.stderr
				}
				_, err := out.Write(l.Bytes())
				return err
			})
			mu.Lock()
			if err == nil {
				last = p
			}
			mu.Unlock()
			errs <- err
		}()
	}
	var first error
	for range streams {
		if err := <-errs; err != nil && first == nil {
			first = err
		}
	}
	if first != nil {
		return first
	}
	if c.json {
		c.emitLine(map[string]any{"process": last})
	}
	return nil
}

func (c *cli) killCmd() *cobra.Command {
	var signal string
	cmd := &cobra.Command{
		Use:   "kill WS|SANDBOX PROC [--signal SIG]",
		Short: "Send a signal (default TERM) to every process of a background process's tree",
		Args:  cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, err := c.client()
			if err != nil {
				return err
			}
			p, err := cl.SignalProcess(cmd.Context(), args[0], args[1], signal)
			if err != nil {
				return err
			}
			return c.emit(p, func(w io.Writer) { fmt.Fprintf(w, "%s %s\n", p.ID, p.State) })
		},
	}
	cmd.Flags().StringVarP(&signal, "signal", "s", "TERM", "signal name (TERM, KILL, INT, HUP, ...) or number")
	return cmd
}

func (c *cli) stdinCmd() *cobra.Command {
	var closeIt bool
	cmd := &cobra.Command{
		Use:   "stdin WS|SANDBOX PROC [--close]",
		Short: "Send agentbox's stdin to a background process's input; --close ends its input after it",
		Args:  cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, err := c.client()
			if err != nil {
				return err
			}
			var total int64
			buf := make([]byte, 64<<10)
			if !isTerminal(c.stdin) {
				for {
					n, rerr := c.stdin.Read(buf)
					if n > 0 {
						r, err := cl.WriteStdin(cmd.Context(), args[0], args[1], buf[:n], false)
						total += r.Written
						if err != nil {
							return err
						}
					}
					if rerr == io.EOF {
						break
					}
					if rerr != nil {
						return rerr
					}
				}
			}
			res := client.ProcessStdinResult{Written: total}
			if closeIt {
				r, err := cl.WriteStdin(cmd.Context(), args[0], args[1], nil, true)
				if err != nil {
					return err
				}
				res.Closed = r.Closed
			}
			return c.emit(res, func(w io.Writer) {})
		},
	}
	cmd.Flags().BoolVar(&closeIt, "close", false, "close the process's input afterwards (it reads end of file)")
	return cmd
}

func (c *cli) resizeCmd() *cobra.Command {
	var cols, rows int
	cmd := &cobra.Command{
		Use:   "resize WS|SANDBOX PROC --cols N --rows N",
		Short: "Set the size of a background process's terminal (exec --detach --tty); it gets SIGWINCH",
		Args:  cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, err := c.client()
			if err != nil {
				return err
			}
			p, err := cl.ResizeProcess(cmd.Context(), args[0], args[1], cols, rows)
			if err != nil {
				return err
			}
			return c.emit(p, func(w io.Writer) { fmt.Fprintf(w, "%s %s %dx%d\n", p.ID, p.State, p.Cols, p.Rows) })
		},
	}
	cmd.Flags().IntVar(&cols, "cols", 0, "columns, 1 to 1000")
	cmd.Flags().IntVar(&rows, "rows", 0, "rows, 1 to 1000")
	cmd.MarkFlagRequired("cols")
	cmd.MarkFlagRequired("rows")
	return cmd
}

func (c *cli) waitCmd() *cobra.Command {
	var timeout time.Duration
	cmd := &cobra.Command{
		Use:   "wait WS|SANDBOX PROC [--timeout DUR]",
		Short: "Wait for a background process to end; exits with its status (124 if it still runs at the timeout)",
		Args:  cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, err := c.client()
			if err != nil {
				return err
			}
			p, err := cl.WaitProcess(cmd.Context(), args[0], args[1], timeout)
			if err != nil {
				return err
			}
			if err := c.emit(p, func(w io.Writer) {
				fmt.Fprintf(w, "%s %s", p.ID, p.State)
				if p.Reason != "" {
					fmt.Fprintf(w, ": %s", p.Reason)
				}
				fmt.Fprintln(w)
			}); err != nil {
				return err
			}
			switch {
			case p.State == "running":
				return exitError{code: 124}
			case p.State == "lost":
				return exitError{code: 255}
			case p.Signal != 0:
				return exitError{code: 128 + p.Signal}
			case p.ExitCode != 0:
				return exitError{code: p.ExitCode}
			}
			return nil
		},
	}
	cmd.Flags().DurationVar(&timeout, "timeout", 30*time.Second, "give up after this long (at most 10m)")
	return cmd
}

func (c *cli) portCmd() *cobra.Command {
	var closeIt bool
	cmd := &cobra.Command{
		Use:   "port WS|SANDBOX [PORT] [--close]",
		Short: "Reach a server listening on PORT inside the sandbox from the host: prints a loopback URL",
		Long: "Publish PORT of the workspace's running sandbox on the host: the daemon listens on 127.0.0.1 " +
			"on a port of its own and relays every connection, through the sandbox's guest, to 127.0.0.1:PORT " +
			"inside the sandbox, which still has no network. Prints the URL (the same one when published " +
			"again). Without PORT, lists the published ports; --close unpublishes PORT. The same port is " +
			"reachable through the API at /v1/sandboxes/SANDBOX/ports/PORT/.",
		Args: cobra.RangeArgs(1, 2),
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, err := c.client()
			if err != nil {
				return err
			}
			if len(args) == 1 {
				if closeIt {
					return fmt.Errorf("port --close: which port? %w", client.ErrInvalid)
				}
				ps, err := cl.ListPorts(cmd.Context(), args[0])
				if err != nil {
					return err
				}
				return c.emit(map[string]any{"ports": ps}, func(w io.Writer) {
					tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
					fmt.Fprintln(tw, "PORT\tURL\tSANDBOX\tCONNECTIONS\tACTIVE")
					for _, p := range ps {
						fmt.Fprintf(tw, "%d\t%s\t%s\t%d\t%d\n", p.Port, p.URL, p.SandboxID, p.Connections, p.Active)
					}
					tw.Flush()
				})
			}
			port, err := strconv.Atoi(args[1])
			if err != nil {
				return fmt.Errorf("port %q is not a number: %w", args[1], client.ErrInvalid)
			}
			if closeIt {
				if err := cl.UnpublishPort(cmd.Context(), args[0], port); err != nil {
					return err
				}
				return c.emit(map[string]any{"port": port, "removed": true}, func(w io.Writer) {})
			}
			p, err := cl.PublishPort(cmd.Context(), args[0], port)
			if err != nil {
				return err
			}
			return c.emit(p, func(w io.Writer) { fmt.Fprintln(w, p.URL) })
		},
	}
	cmd.Flags().BoolVar(&closeIt, "close", false, "unpublish PORT")
	return cmd
}
