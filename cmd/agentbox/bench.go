package main

import (
	"io"
	"os"

	"github.com/spf13/cobra"

	"github.com/agentbox/agentbox/internal/bench"
)

func (c *cli) benchCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "bench", Short: "Measure agentbox against its baselines on this machine, side by side"}
	cmd.AddCommand(c.benchWorkspaceCmd())
	return cmd
}

func (c *cli) benchWorkspaceCmd() *cobra.Command {
	var opts bench.WorkspaceOptions
	cmd := &cobra.Command{
		Use:   "workspace",
		Short: "ws create (overlay, copy) vs git clone --shared and git worktree add; ws fork (runs in-process, as root)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			var progress io.Writer = c.stderr
			if c.json {
				progress = nil
			}
			res, err := bench.Workspace(cmd.Context(), opts, progress)
			if err != nil {
				return err
			}
			return c.emit(map[string]any{"id": "bench-workspace", "result": res}, func(w io.Writer) { res.Print(w) })
		},
	}
	fl := cmd.Flags()
	fl.IntVar(&opts.Files, "files", bench.DefaultFiles, "files in the generated repo")
	fl.IntVar(&opts.Runs, "runs", bench.DefaultRuns, "measured runs per case")
	fl.IntVar(&opts.Changed, "changed", bench.DefaultChanged, "files changed in the workspace before a fork")
	fl.StringVar(&opts.DataDir, "dir", os.Getenv("AGENTBOX_BENCH_DIR"), "scratch dir (default a temp dir)")
	return cmd
}
