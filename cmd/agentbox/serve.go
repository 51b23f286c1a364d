package main

import (
	"os"

	"github.com/spf13/cobra"

	"github.com/agentbox/agentbox/internal/config"
	"github.com/agentbox/agentbox/internal/daemon"
)

func (c *cli) serveCmd() *cobra.Command {
	var file string
	var f config.Config
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Run the daemon (unix socket in the data dir by default)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			cfg, err := config.Load(file)
			if err != nil {
				return err
			}
			// Flags override file and environment.
			fl := cmd.Flags()
			if fl.Changed("data") {
				cfg.DataDir = f.DataDir
			}
			if fl.Changed("store") {
				cfg.Store = f.Store
			}
			if fl.Changed("listen") {
				cfg.Listen = f.Listen
			}
			if fl.Changed("e2b-listen") {
				cfg.E2BListen = f.E2BListen
			}
			if fl.Changed("workspace-driver") {
				cfg.WorkspaceDriver = f.WorkspaceDriver
			}
			if fl.Changed("log-level") {
				cfg.LogLevel = f.LogLevel
			}
			if fl.Changed("log-format") {
				cfg.LogFormat = f.LogFormat
			}
			if err := cfg.Validate(); err != nil {
				return err
			}
			return daemon.Run(cmd.Context(), cfg, daemon.NewLogger(cfg, os.Stderr), nil)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&file, "config", "", "YAML config file (default $AGENTBOX_CONFIG)")
	fl.StringVar(&f.DataDir, "data", "", "data dir (default $AGENTBOX_DATA, /var/lib/agentbox for root)")
	fl.StringVar(&f.Store, "store", "", "postgres://USER:PASSWORD@HOST:PORT/DATABASE to keep state in PostgreSQL (default $AGENTBOX_STORE, else the SQLite file in the data dir)")
	fl.StringVar(&f.Listen, "listen", "", "tcp://HOST:PORT to listen on TCP (needs $AGENTBOX_TOKEN)")
	fl.StringVar(&f.E2BListen, "e2b-listen", "", "tcp://HOST:PORT to serve the E2B-compatible endpoint on (its API key is $AGENTBOX_TOKEN)")
	fl.StringVar(&f.WorkspaceDriver, "workspace-driver", "", "auto, overlay or copy")
	fl.StringVar(&f.LogLevel, "log-level", "", "debug, info, warn or error")
	fl.StringVar(&f.LogFormat, "log-format", "", "json or text")
	return cmd
}
