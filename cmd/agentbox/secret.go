package main

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/agentbox/agentbox/internal/errdefs"
	"github.com/agentbox/agentbox/internal/secrets"
)

// The secret commands store values that sandboxes may use through the
// egress proxy but never see. A value goes in on stdin, never as an
// argument (which any process on the host could read), and never comes out.
func (c *cli) secretCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "secret", Short: "Secrets sandboxes can use but never see"}
	cmd.AddCommand(c.secretSetCmd(), c.secretLsCmd(), c.secretRmCmd())
	return cmd
}

func (c *cli) secretSetCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "set NAME",
		Short: "Store a secret; the value is read from stdin (one trailing newline is dropped)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			value, err := c.readSecret()
			if err != nil {
				return err
			}
			cl, err := c.client()
			if err != nil {
				return err
			}
			if err := cl.SetSecret(cmd.Context(), args[0], string(value)); err != nil {
				return err
			}
			return c.emit(map[string]any{"id": args[0], "name": args[0], "set": true}, func(w io.Writer) {
				fmt.Fprintf(w, "set %s (%d bytes)\n", args[0], len(value))
			})
		},
	}
}

// readSecret reads a value from stdin: without echo from a terminal.
func (c *cli) readSecret() ([]byte, error) {
	var v []byte
	var err error
	if f, ok := c.stdin.(*os.File); ok && term.IsTerminal(int(f.Fd())) {
		fmt.Fprint(c.stderr, "value: ")
		v, err = term.ReadPassword(int(f.Fd()))
		fmt.Fprintln(c.stderr)
	} else {
		v, err = io.ReadAll(io.LimitReader(c.stdin, secrets.MaxValueBytes+2))
	}
	if err != nil {
		return nil, fmt.Errorf("reading the secret from stdin: %w", err)
	}
	v = bytes.TrimSuffix(bytes.TrimSuffix(v, []byte("\n")), []byte("\r"))
	if len(v) == 0 {
		return nil, errdefs.Invalid("no value on stdin: pipe the secret in, e.g. printf %%s \"$TOKEN\" | agentbox secret set NAME")
	}
	return v, nil
}

func (c *cli) secretLsCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "ls",
		Short: "List secrets by name",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, err := c.client()
			if err != nil {
				return err
			}
			list, err := cl.ListSecrets(cmd.Context())
			if err != nil {
				return err
			}
			return c.emit(map[string]any{"id": "secrets", "secrets": list}, func(w io.Writer) {
				tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
				fmt.Fprintln(tw, "NAME\tUPDATED")
				for _, s := range list {
					fmt.Fprintf(tw, "%s\t%s\n", s.Name, s.UpdatedAt.Local().Format(time.DateTime))
				}
				tw.Flush()
			})
		},
	}
}

func (c *cli) secretRmCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "rm NAME",
		Short: "Remove a secret",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, err := c.client()
			if err != nil {
				return err
			}
			if err := cl.RemoveSecret(cmd.Context(), args[0]); err != nil {
				return err
			}
			return c.emit(map[string]any{"id": args[0], "removed": true}, func(w io.Writer) {
				fmt.Fprintf(w, "removed %s\n", args[0])
			})
		},
	}
}
