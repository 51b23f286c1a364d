package main

import (
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/agentbox/agentbox/client"
)

func (c *cli) nodesCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "nodes",
		Short: "List the daemons sharing this daemon's store (up, stopped, or lost when the heartbeat lapsed)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, err := c.client()
			if err != nil {
				return err
			}
			ns, err := cl.ListNodes(cmd.Context())
			if err != nil {
				return err
			}
			return c.emit(map[string]any{"nodes": ns}, func(w io.Writer) { printNodes(w, ns, time.Now()) })
		},
	}
}

func printNodes(w io.Writer, ns []client.Node, now time.Time) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tSTATE\tHOST\tPID\tHEARTBEAT\tWORKSPACES\tSANDBOXES\tADDR\tDATA DIR")
	for _, n := range ns {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s ago\t%d\t%d\t%s\t%s\n", n.ID, n.State, n.Host, n.PID,
			now.Sub(n.HeartbeatAt).Truncate(time.Second), n.Workspaces, n.Sandboxes, n.Addr, n.DataDir)
	}
	tw.Flush()
}
