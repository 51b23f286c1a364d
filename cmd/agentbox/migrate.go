package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/agentbox/agentbox/internal/config"
	"github.com/agentbox/agentbox/internal/daemon"
	"github.com/agentbox/agentbox/internal/errdefs"
	"github.com/agentbox/agentbox/internal/store"
	"github.com/agentbox/agentbox/internal/store/sqlstore"
)

// migrateReport is what agentbox migrate copied.
type migrateReport struct {
	From   string           `json:"from"`
	To     string           `json:"to"`
	Tables map[string]int64 `json:"tables"`
	Rows   int64            `json:"rows"`
}

func (c *cli) migrateCmd() *cobra.Command {
	var file, data, to string
	cmd := &cobra.Command{
		Use:   "migrate --to postgres://...",
		Short: "Copy a data dir's SQLite state into an empty PostgreSQL database",
		Long: `Copy every table of the data dir's SQLite database (repos, checkouts,
workspaces, sandboxes, execs, events, sealed secrets, usage, candidates,
forges...) into an empty PostgreSQL database, in one transaction: all of it
or nothing. The daemon must be stopped (migrate holds the data dir's lock
meanwhile, so none can start), and the target must be empty. The SQLite
file stays, brought to this version's schema first, as serve would. Then serve with --store and the same data dir, which
keeps the files, the workspaces and the key that unseals the secrets.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			if !sqlstore.IsPostgresURL(to) {
				return errdefs.Invalid("--to %s is not a postgres:// URL", store.RedactURL(to))
			}
			cfg, err := config.Load(file)
			if err != nil {
				return err
			}
			if cmd.Flags().Changed("data") {
				cfg.DataDir = data
			}
			dir, err := filepath.Abs(cfg.DataDir)
			if err != nil {
				return err
			}
			path := filepath.Join(dir, "agentbox.db")
			if _, err := os.Stat(path); err != nil {
				return fmt.Errorf("data dir %s has no SQLite database to migrate: %w", dir, errdefs.ErrNotFound)
			}
			held, err := daemon.HoldDataDir(dir)
			if err != nil {
				return err
			}
			defer held.Unlock()
			src, err := sqlstore.Open(ctx, path)
			if err != nil {
				return err
			}
			defer src.Close()
			dst, err := sqlstore.OpenPostgres(ctx, to)
			if err != nil {
				return err
			}
			defer dst.Close()
			// A lock lost mid-copy ends the copy's transaction.
			ctx, cancel := context.WithCancelCause(ctx)
			defer cancel(nil)
			release, err := dst.HoldExclusive(ctx, func(err error) { cancel(err) })
			if err != nil {
				return err
			}
			defer release()
			stats, err := src.CopyTo(ctx, dst)
			if cause := context.Cause(ctx); err != nil && cause != nil {
				err = cause
			}
			if err != nil {
				return fmt.Errorf("migrating %s to %s: %w", path, store.RedactURL(to), err)
			}
			rep := migrateReport{From: path, To: store.RedactURL(to), Tables: stats}
			for _, n := range stats {
				rep.Rows += n
			}
			return c.emit(rep, func(w io.Writer) { printMigrate(w, rep) })
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&to, "to", "", "the PostgreSQL database to copy into (postgres://USER:PASSWORD@HOST:PORT/DATABASE), empty")
	fl.StringVar(&file, "config", "", "YAML config file (default $AGENTBOX_CONFIG)")
	fl.StringVar(&data, "data", "", "data dir (default $AGENTBOX_DATA, /var/lib/agentbox for root)")
	cmd.MarkFlagRequired("to")
	return cmd
}

func printMigrate(w io.Writer, rep migrateReport) {
	fmt.Fprintf(w, "copied %d rows from %s to %s\n", rep.Rows, rep.From, rep.To)
	tables := make([]string, 0, len(rep.Tables))
	for t := range rep.Tables {
		tables = append(tables, t)
	}
	slices.Sort(tables)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "TABLE\tROWS")
	for _, t := range tables {
		fmt.Fprintf(tw, "%s\t%d\n", t, rep.Tables[t])
	}
	tw.Flush()
	fmt.Fprintf(w, "serve with: agentbox serve --data %s --store '%s'\n", filepath.Dir(rep.From), rep.To)
}
