// Command agentbox is the agentbox daemon (`agentbox serve`) and its CLI.
// Every other subcommand is a client of the daemon's API, except doctor
// and bench, which inspect and measure this machine directly.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/agentbox/agentbox/client"
	"github.com/agentbox/agentbox/internal/api"
	"github.com/agentbox/agentbox/internal/errdefs"
)

// cli holds the global flags and output streams.
type cli struct {
	json   bool
	host   string
	stdout io.Writer
	stderr io.Writer
	stdin  io.Reader
}

// exitError carries an exit status without a message (agentbox exec will
// use it to return the command's own status).
type exitError struct{ code int }

func (e exitError) Error() string { return fmt.Sprintf("exit status %d", e.code) }

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

func run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	c := &cli{stdout: stdout, stderr: stderr, stdin: stdin}
	root := c.rootCmd()
	root.SetArgs(args)
	root.SetIn(stdin)
	root.SetOut(stdout)
	root.SetErr(stderr)
	err := root.ExecuteContext(ctx)
	if err == nil {
		return 0
	}
	var ee exitError
	if errors.As(err, &ee) {
		return ee.code
	}
	c.printError(err)
	return 1
}

func (c *cli) rootCmd() *cobra.Command {
	root := &cobra.Command{
		Use:           "agentbox",
		Short:         "Sandboxes for AI coding agents: repo cache, durable workspaces, isolated execution",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.PersistentFlags().BoolVar(&c.json, "json", false, "print exactly one JSON document")
	root.PersistentFlags().StringVar(&c.host, "host", "", "daemon address (default $AGENTBOX_HOST or unix://$AGENTBOX_DATA/agentbox.sock)")
	root.SetFlagErrorFunc(func(cmd *cobra.Command, err error) error {
		return errdefs.Invalid("%s: %v", cmd.CommandPath(), err)
	})
	root.AddCommand(c.serveCmd(), c.repoCmd(), c.wsCmd(), c.filesCmd(), c.eventsCmd(), c.gcCmd(), c.usageCmd(), c.sandboxCmd(), c.execCmd(), c.psCmd(), c.logsCmd(), c.killCmd(), c.stdinCmd(), c.resizeCmd(), c.waitCmd(), c.portCmd(), c.shellCmd(), c.cpCmd(), c.secretCmd(), c.doctorCmd(), c.benchCmd(), c.imageCmd(), c.policyCmd(), c.mcpCmd(), c.reviewCmd(), c.compareCmd(), c.solveCmd(), c.evalCmd(), c.forgeCmd(), c.e2bCmd(), c.migrateCmd(), c.nodesCmd(), c.versionCmd())
	usageErrors(root)
	return root
}

// usageErrors makes every usage mistake an ErrInvalid naming the command,
// so that it prints as code "invalid" (in --json mode as a JSON document):
// a wrong number of arguments, a missing required flag, an unknown
// command. (Unknown flags and bad flag values go through the root's flag
// error function.)
func usageErrors(cmd *cobra.Command) {
	for _, sub := range cmd.Commands() {
		usageErrors(sub)
	}
	if cmd.HasSubCommands() && !cmd.Runnable() {
		// A group: with no command it prints its help; with an unknown
		// one it says so (cobra's own check covers the root only, and
		// before the flags, --json included, are read).
		cmd.Args = cobra.ArbitraryArgs
		cmd.RunE = func(cmd *cobra.Command, args []string) error {
			if len(args) > 0 {
				return errdefs.Invalid("unknown command %q for %q (see %s --help)", args[0], cmd.CommandPath(), cmd.CommandPath())
			}
			return cmd.Help()
		}
		return
	}
	if check := cmd.Args; check != nil {
		cmd.Args = func(cmd *cobra.Command, args []string) error {
			if err := check(cmd, args); err != nil {
				return errdefs.Invalid("%s: %v (usage: %s)", cmd.CommandPath(), err, cmd.UseLine())
			}
			return nil
		}
	}
	// Required flags are checked here rather than by cobra, whose error
	// has no class.
	var required []string
	cmd.Flags().VisitAll(func(f *pflag.Flag) {
		if _, ok := f.Annotations[cobra.BashCompOneRequiredFlag]; ok {
			required = append(required, f.Name)
			delete(f.Annotations, cobra.BashCompOneRequiredFlag)
		}
	})
	if run := cmd.RunE; run != nil && len(required) > 0 {
		cmd.RunE = func(cmd *cobra.Command, args []string) error {
			for _, name := range required {
				if !cmd.Flags().Changed(name) {
					return errdefs.Invalid("%s: required flag --%s is not set (usage: %s)", cmd.CommandPath(), name, cmd.UseLine())
				}
			}
			return run(cmd, args)
		}
	}
}

func (c *cli) client() (*client.Client, error) {
	host := c.host
	if host == "" {
		host = client.DefaultHost()
	}
	return client.New(host, os.Getenv("AGENTBOX_TOKEN"))
}

// emit prints v as JSON with --json, else calls human.
func (c *cli) emit(v any, human func(w io.Writer)) error {
	if c.json {
		enc := json.NewEncoder(c.stdout)
		enc.SetIndent("", "  ")
		enc.SetEscapeHTML(false)
		return enc.Encode(v)
	}
	human(c.stdout)
	return nil
}

func (c *cli) printError(err error) {
	b := api.ErrorOf(err)
	var ce *client.Error
	if errors.As(err, &ce) {
		b.Error.Code = ce.Code
	}
	msg := strings.ReplaceAll(b.Error.Message, "\n", " ")
	if c.json {
		b.Error.Message = msg
		enc := json.NewEncoder(c.stdout)
		enc.SetEscapeHTML(false)
		enc.Encode(b)
		return
	}
	fmt.Fprintf(c.stderr, "agentbox: %s\n", msg)
}

func (c *cli) versionCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the version",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return c.emit(map[string]string{"id": "agentbox", "version": api.Version}, func(w io.Writer) {
				fmt.Fprintln(w, "agentbox", api.Version)
			})
		},
	}
}

// emitLine prints v as one compact JSON line (for streams).
func (c *cli) emitLine(v any) {
	enc := json.NewEncoder(c.stdout)
	enc.SetEscapeHTML(false)
	enc.Encode(v)
}
