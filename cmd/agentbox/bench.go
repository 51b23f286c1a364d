package main

import "github.com/spf13/cobra"

func (c *cli) benchCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "bench", Short: "Measure agentbox against its baselines on this machine"}
	return cmd
}
