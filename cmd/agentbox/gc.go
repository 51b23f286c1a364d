package main

import (
	"fmt"
	"io"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/agentbox/agentbox/client"
	"github.com/agentbox/agentbox/internal/errdefs"
)

func (c *cli) gcCmd() *cobra.Command {
	var req client.GCRequest
	var budget string
	cmd := &cobra.Command{
		Use:   "gc [--dry-run] [--budget SIZE]",
		Short: "Collect disk under the data budget (idle sandboxes, unused checkouts, old repo caches)",
		Long: `Collect disk until the data dir is within its budget (data_budget, or --budget):
what is left of stopped sandboxes and idle sandboxes first, then pristine
checkouts no workspace uses, then repo caches no workspace depends on (least
recently used first), then, only when workspace_retention is set, clean
workspaces unused that long. A workspace with changes is never removed.
--dry-run lists what would go and why, and changes nothing.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			var err error
			if req.Budget, err = sizeFlag("budget", budget); err != nil {
				return err
			}
			cl, err := c.client()
			if err != nil {
				return err
			}
			rep, err := cl.GC(cmd.Context(), req)
			if err != nil {
				return err
			}
			return c.emit(rep, func(w io.Writer) { printGC(w, rep) })
		},
	}
	cmd.Flags().BoolVar(&req.DryRun, "dry-run", false, "list what would go and why; remove nothing")
	cmd.Flags().StringVar(&budget, "budget", "", "collect down to this size (e.g. 10G) instead of the daemon's data_budget")
	return cmd
}

func printGC(w io.Writer, rep client.GCReport) {
	verb := "removed"
	if rep.DryRun {
		verb = "would remove"
	}
	fmt.Fprintf(w, "usage %s (%s), budget %s\n", humanBytes(rep.UsageBytes), rep.Method, humanBytes(rep.BudgetBytes))
	if len(rep.Items) > 0 {
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "TIER\tKIND\tID\tSIZE\tSTATUS\tREASON")
		for _, it := range rep.Items {
			status := verb
			if it.Error != "" {
				status = "failed: " + it.Error
			}
			fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\n", it.Tier, it.Kind, it.ID, humanBytes(it.Bytes), status, it.Reason)
		}
		tw.Flush()
	}
	state := "within the budget"
	if !rep.UnderBudget {
		state = "still over the budget: nothing else may be collected"
	}
	fmt.Fprintf(w, "%s %d object(s), %s; usage after %s, %s\n", verb, len(rep.Items), humanBytes(rep.FreedBytes), humanBytes(rep.AfterBytes), state)
}

// sizeFlag reads the size a flag --name gave ("2G"); empty is zero.
func sizeFlag(name, v string) (client.ByteSize, error) {
	if v == "" {
		return 0, nil
	}
	b, err := client.ParseByteSize(v)
	if err != nil {
		return 0, errdefs.Invalid("--%s: %v", name, err)
	}
	return b, nil
}
