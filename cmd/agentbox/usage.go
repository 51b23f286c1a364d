package main

import (
	"fmt"
	"io"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/agentbox/agentbox/client"
)

func (c *cli) usageCmd() *cobra.Command {
	var f client.UsageFilter
	cmd := &cobra.Command{
		Use:   "usage [--task LABEL] [--since T]",
		Short: "Show what each task used: CPU, peak memory, wall time, execs, output, egress",
		Long: `Sums, per task label, the execs of its workspaces (removed ones included):
CPU seconds of the commands' whole process trees, the largest peak memory of
one command, wall seconds, the number of execs and their output bytes; and
the bytes their sandboxes' egress moved. Workspaces without a label are
listed as "-". --since takes an RFC 3339 time or a duration ("2h" ago).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, err := c.client()
			if err != nil {
				return err
			}
			u, err := cl.Usage(cmd.Context(), f)
			if err != nil {
				return err
			}
			return c.emit(u, func(w io.Writer) {
				tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
				fmt.Fprintln(tw, "TASK\tWORKSPACES\tEXECS\tCPU S\tPEAK MEM\tWALL S\tOUTPUT\tEGRESS")
				for _, t := range u.Tasks {
					task := t.Task
					if task == "" {
						task = "-"
					}
					fmt.Fprintf(tw, "%s\t%d\t%d\t%.2f\t%s\t%.2f\t%s\t%s\n", task, t.Workspaces, t.Execs, t.CPUSeconds,
						humanBytes(t.PeakMemBytes), t.WallSeconds, humanBytes(t.OutputBytes), humanBytes(t.EgressBytes))
				}
				tw.Flush()
			})
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&f.Task, "task", "", "only this task label")
	fl.StringVar(&f.Since, "since", "", "only what started at or after this time (RFC 3339, or a duration ago like 2h)")
	return cmd
}
