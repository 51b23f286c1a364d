package main

import (
	"fmt"
	"io"
	"os"

	"github.com/spf13/cobra"
	"sigs.k8s.io/yaml"

	"github.com/agentbox/agentbox/internal/errdefs"
	"github.com/agentbox/agentbox/internal/policy"
)

// The policy commands run on this machine, not through the daemon: a
// policy can be checked before any daemon exists.
func (c *cli) policyCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "policy", Short: "Work with sandbox policy documents"}
	cmd.AddCommand(c.policyCheckCmd())
	return cmd
}

func (c *cli) policyCheckCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "check FILE",
		Short: "Check a policy (JSON or YAML; - reads stdin) against the default ceilings and print its canonical form",
		Long: `Check a policy document (JSON or YAML; "-" reads stdin): parse it strictly,
validate it against the daemon's default ceilings and print it in canonical
form (host names lower case and in ASCII, defaults filled in). A problem is
reported with the field it is in, as in network.allow[2] or limits.memory.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			name := args[0]
			data, err := c.readPolicy(name)
			if err != nil {
				return err
			}
			if name == "-" {
				name = "stdin"
			}
			p, err := policy.Parse(data)
			if err == nil {
				err = p.Validate(policy.DefaultCeilings())
			}
			if err != nil {
				return fmt.Errorf("%s: %w", name, err)
			}
			y, err := yaml.Marshal(p)
			if err != nil {
				return fmt.Errorf("printing policy %s: %w", name, err)
			}
			return c.emit(map[string]any{"id": "policy-check", "file": name, "policy": p}, func(w io.Writer) {
				fmt.Fprintf(w, "# %s: valid under the default ceilings; canonical form:\n%s", name, y)
			})
		},
	}
}

// readPolicy reads at most one byte more than a policy may have, so that
// Parse reports an oversized document without the whole of it in memory.
func (c *cli) readPolicy(name string) ([]byte, error) {
	var r io.Reader = c.stdin
	if name != "-" {
		f, err := os.Open(name)
		if err != nil {
			return nil, errdefs.Invalid("reading policy: %v", err)
		}
		defer f.Close()
		r = f
	}
	data, err := io.ReadAll(io.LimitReader(r, policy.MaxDocumentBytes+1))
	if err != nil {
		return nil, errdefs.Invalid("reading policy %s: %v", name, err)
	}
	return data, nil
}
