package main

import (
	"fmt"
	"io"
	"os"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/agentbox/agentbox/internal/config"
	"github.com/agentbox/agentbox/internal/doctor"
)

func (c *cli) doctorCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "doctor",
		Short: "Check what this machine offers agentbox and how to fix what is missing",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			cfg, err := config.Load("")
			if err != nil {
				return err
			}
			dataDir := cfg.DataDir
			if _, err := os.Stat(dataDir); err != nil {
				dataDir = ""
			}
			rep := doctor.Run(cmd.Context(), doctor.Options{DataDir: dataDir})
			err = c.emit(map[string]any{"id": "doctor", "ok": rep.OK, "checks": rep.Checks, "probes": rep.Probes}, func(w io.Writer) {
				tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
				for _, ch := range rep.Checks {
					fmt.Fprintf(tw, "%s\t%s\t%s\n", mark(string(ch.Status)), ch.Name, ch.Detail)
					if ch.Fix != "" {
						fmt.Fprintf(tw, "\t\tfix: %s\n", ch.Fix)
					}
				}
				tw.Flush()
			})
			if err != nil {
				return err
			}
			if !rep.OK {
				return exitError{code: 1}
			}
			return nil
		},
	}
}

func mark(status string) string {
	switch status {
	case "ok":
		return "ok"
	case "warn":
		return "WARN"
	}
	return "MISSING"
}
