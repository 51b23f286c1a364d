package main

import (
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"github.com/agentbox/agentbox/client"
)

// wsDepsCmd is `agentbox ws deps`: packages admitted into a workspace
// from the operator's approved manifest.
func (c *cli) wsDepsCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "deps", Short: "Admit approved packages into a workspace, to install offline in its sandbox"}
	cmd.AddCommand(&cobra.Command{
		Use:   "add WS ECOSYSTEM:NAME@VERSION...",
		Short: "Admit packages (npm:is-number@7.0.0) from the daemon's approved manifest",
		Long: `Admit packages into workspace WS. Each must be in the daemon's approved
manifest (dependencies.approved in its configuration) at exactly the version
asked: a range (^1.2.0), a tag (latest) or an unlisted package is denied with
the reason. The daemon fetches the artifact from its pinned source through the
egress checks, verifies its digest and writes it under .agentbox/deps/; install
it inside the sandbox, which stays offline:

  agentbox exec WS -- npm install --offline ./.agentbox/deps/is-number-7.0.0.tgz

Packages are admitted in order; the first denial stops the command (exit 1).`,
		Args: cobra.MinimumNArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, err := c.client()
			if err != nil {
				return err
			}
			admitted := []client.Dependency{}
			for _, spec := range args[1:] {
				d, err := cl.AddDependency(cmd.Context(), args[0], spec)
				if err != nil {
					// What was admitted before stays admitted: say so.
					if len(admitted) > 0 && !c.json {
						printAdmitted(c.stdout, admitted)
					}
					return err
				}
				admitted = append(admitted, d)
			}
			return c.emit(map[string]any{"workspace": args[0], "admitted": admitted}, func(w io.Writer) { printAdmitted(w, admitted) })
		},
	})
	return cmd
}

func printAdmitted(w io.Writer, ds []client.Dependency) {
	for _, d := range ds {
		fmt.Fprintf(w, "admitted %s:%s@%s (%s) at %s\n  install: %s\n", d.Ecosystem, d.Name, d.Version, d.Integrity, d.Path, d.Install)
	}
}
