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
	root.AddCommand(c.serveCmd(), c.repoCmd(), c.wsCmd(), c.filesCmd(), c.eventsCmd(), c.gcCmd(), c.usageCmd(), c.sandboxCmd(), c.execCmd(), c.shellCmd(), c.cpCmd(), c.secretCmd(), c.doctorCmd(), c.benchCmd(), c.imageCmd(), c.policyCmd(), c.versionCmd())
	return root
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
	code := errdefs.Code(err)
	var ce *client.Error
	if errors.As(err, &ce) {
		code = ce.Code
	}
	msg := strings.ReplaceAll(err.Error(), "\n", " ")
	if c.json {
		var b api.ErrorBody
		b.Error.Code, b.Error.Message = code, msg
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
