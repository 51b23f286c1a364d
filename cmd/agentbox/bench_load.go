package main

import (
	"fmt"
	"io"
	"os"

	"github.com/spf13/cobra"

	"github.com/agentbox/agentbox/internal/bench"
	"github.com/agentbox/agentbox/internal/config"
)

// daemonOptions are the measured daemon's: this very binary run as
// `agentbox serve` on a scratch dir, with the configured guest and engine.
func daemonOptions(image string) (bench.DaemonOptions, error) {
	cfg, err := config.Load("")
	if err != nil {
		return bench.DaemonOptions{}, err
	}
	exe, err := os.Executable()
	if err != nil {
		return bench.DaemonOptions{}, fmt.Errorf("finding the agentbox binary to run as the daemon: %w", err)
	}
	return bench.DaemonOptions{Binary: exe, GuestBinary: benchGuest(cfg), Image: image, DockerHost: cfg.DockerHost}, nil
}

func (c *cli) benchLoadCmd() *cobra.Command {
	var opts bench.LoadOptions
	var image, store string
	cmd := &cobra.Command{
		Use:   "load",
		Short: "N clients doing mixed operations against a real daemon for a bounded time: errors, p50/p99 per operation, memory growth, leaks",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			var err error
			if opts.DaemonOptions, err = daemonOptions(image); err != nil {
				return err
			}
			opts.Store = store
			res, err := bench.Load(cmd.Context(), opts, c.benchProgress())
			if err != nil {
				return err
			}
			return c.emitChecked("bench-load", res)
		},
	}
	fl := cmd.Flags()
	fl.IntVar(&opts.Clients, "clients", bench.DefaultLoadClients, "concurrent clients")
	fl.IntVar(&opts.Nodes, "nodes", 1, "daemons sharing --store (each on its own data dir), the clients spread over them round-robin")
	fl.StringVar(&store, "store", "", "the daemon's store: an empty postgres:// database (default the SQLite file in its scratch data dir)")
	fl.DurationVar(&opts.Duration, "duration", bench.DefaultLoadDuration, "how long clients start new cycles")
	fl.StringVar(&image, "image", bench.DefaultImage, "image of the docker sandboxes (must be in the engine)")
	return cmd
}

func (c *cli) benchDensityCmd() *cobra.Command {
	var opts bench.DensityOptions
	var image string
	cmd := &cobra.Command{
		Use:   "density",
		Short: "How many idle docker sandboxes one daemon holds with each answering an exec within 100 ms, and the daemon's RSS then",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			var err error
			if opts.DaemonOptions, err = daemonOptions(image); err != nil {
				return err
			}
			res, err := bench.Density(cmd.Context(), opts, c.benchProgress())
			if err != nil {
				return err
			}
			return c.emitChecked("bench-density", res)
		},
	}
	fl := cmd.Flags()
	fl.IntVar(&opts.Target, "target", bench.DefaultDensityTarget, "sandboxes to reach")
	fl.IntVar(&opts.Step, "step", bench.DefaultDensityStep, "sandboxes added between sweeps")
	fl.IntVar(&opts.Parallel, "parallel", bench.DefaultDensityParallel, "sandboxes created at once")
	fl.DurationVar(&opts.Settle, "settle", bench.DefaultDensitySettle, "pause before a sweep that broke the bound is repeated (the step's creations settling)")
	fl.StringVar(&image, "image", bench.DefaultImage, "image of the docker sandboxes (must be in the engine)")
	return cmd
}

// benchProgress is where a benchmark writes its progress: stderr, or
// nowhere with --json.
func (c *cli) benchProgress() io.Writer {
	if c.json {
		return nil
	}
	return c.stderr
}

// checkedResult is a benchmark result with targets it meets or not.
type checkedResult interface {
	Print(io.Writer)
	OK() bool
}

// emitChecked prints res and exits 1 when it misses a target.
func (c *cli) emitChecked(id string, res checkedResult) error {
	if err := c.emit(map[string]any{"id": id, "result": res}, res.Print); err != nil {
		return err
	}
	if !res.OK() {
		return exitError{1}
	}
	return nil
}
