package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"

	"github.com/agentbox/agentbox/internal/bench"
	"github.com/agentbox/agentbox/internal/config"
)

func (c *cli) benchCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "bench", Short: "Measure agentbox against its baselines on this machine, side by side"}
	cmd.AddCommand(c.benchWorkspaceCmd(), c.benchLoadCmd(), c.benchDensityCmd())
	for _, b := range []struct {
		use, short string
		runs       int
		run        func(context.Context, bench.SandboxOptions, io.Writer) (bench.SandboxResult, error)
	}{
		{"exec", "exec round trip of `true` (manager and API) vs docker exec on an equivalent container and host fork/exec", bench.DefaultExecRuns, bench.Exec},
		{"create", "create → first exec per backend vs docker run --rm (runc, runsc) and bwrap; --profile shows where the time goes", bench.DefaultCreateRuns, bench.Create},
		{"concurrent", "N sandboxes created at once, each running `true`, vs N concurrent docker run --rm", bench.DefaultConcurrentRuns, bench.Concurrent},
		{"pool", "claim from a warm pool → first exec vs cold create → first exec (docker; --backend local: and vs a bare bwrap run)", bench.DefaultPoolRuns, bench.Pool},
		{"mcp", "MCP tool call round trip (run_command `true`) over stdio (agentbox mcp) and streamable HTTP (/mcp) vs the same exec through /v1; the overhead against a 1 ms goal", bench.DefaultMCPRuns, bench.MCP},
		{"e2b", "the E2B endpoint through the official E2B JS SDK (Node): Sandbox.create → first commands.run('true'), and a commands.run('true') round trip, vs the same through /v1; the ratios", bench.DefaultE2BRuns, bench.E2B},
		{"egress", "download and new-connection HTTP/CONNECT requests from a sandbox through the egress proxy vs the same python client on the host, direct (loopback upstreams)", bench.DefaultEgressRuns, bench.Egress},
		{"suite", "part of networkx's own pytest suite (1,929 tests, from the tool image) in a sandbox per backend vs the same in a chroot of the image on the host; the ratios", bench.DefaultSuiteRuns, bench.Suite},
	} {
		cmd.AddCommand(c.benchSandboxCmd(b.use, b.short, b.runs, func(ctx context.Context, o bench.SandboxOptions, w io.Writer) (any, func(io.Writer), error) {
			res, err := b.run(ctx, o, w)
			return res, res.Print, err
		}))
	}
	// egress is not part of all: on its own it takes over two minutes
	// (a 100 MB download and 2 x 1000 new connections per backend, per run).
	cmd.AddCommand(c.benchSandboxCmd("all", "exec, create and concurrent in one run (not egress: run it on its own)", 0, func(ctx context.Context, o bench.SandboxOptions, w io.Writer) (any, func(io.Writer), error) {
		res, err := bench.All(ctx, o, w)
		return res, res.Print, err
	}))
	return cmd
}

func (c *cli) benchWorkspaceCmd() *cobra.Command {
	var opts bench.WorkspaceOptions
	cmd := &cobra.Command{
		Use:   "workspace",
		Short: "ws create (overlay, copy) vs git clone --shared and git worktree add; ws fork (runs in-process, as root)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			progress := c.benchProgress()
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

// benchSandboxCmd is one of the execution benchmarks. They run in-process
// (as root), with a manager, the real backends and guest, and an API
// server of their own on a temporary socket: no daemon is needed.
func (c *cli) benchSandboxCmd(use, short string, runs int, run func(context.Context, bench.SandboxOptions, io.Writer) (any, func(io.Writer), error)) *cobra.Command {
	var opts bench.SandboxOptions
	var backends string
	var sizeMB int64
	cmd := &cobra.Command{
		Use:   use,
		Short: short,
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			cfg, err := config.Load("")
			if err != nil {
				return err
			}
			if backends != "" {
				opts.Backends = strings.Split(backends, ",")
			}
			opts.EgressBytes = sizeMB * 1e6
			if opts.GuestBinary == "" {
				opts.GuestBinary = benchGuest(cfg)
			}
			if opts.Binary, err = os.Executable(); err != nil {
				return err
			}
			opts.ImagesDir = filepath.Join(cfg.DataDir, "images")
			opts.DockerHost = cfg.DockerHost
			if opts.Kubeconfig == "" && cfg.Kubernetes != nil {
				opts.Kubeconfig = cfg.Kubernetes.Kubeconfig
			}
			progress := c.benchProgress()
			res, print, err := run(cmd.Context(), opts, progress)
			if err != nil {
				return err
			}
			return c.emit(map[string]any{"id": "bench-" + use, "result": res}, print)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&backends, "backend", "", "comma-separated backends: "+strings.Join(bench.AllBackends, ", ")+" (default: every one that works here)")
	if use == "egress" {
		fl.StringVar(&opts.EgressImage, "image", bench.DefaultEgressImage, "image of the sandboxes, with python3 (agentbox's own images are built when missing)")
		fl.Int64Var(&sizeMB, "size", bench.DefaultEgressBytes/1e6, "download size in MB (10^6 bytes)")
		fl.IntVar(&opts.EgressRequests, "requests", bench.DefaultEgressRequests, "small requests per case, each on a new connection")
	} else if use == "e2b" {
		fl.StringVar(&opts.Image, "image", bench.DefaultE2BImage, "image of the sandboxes, with the bash the SDK runs commands with")
		fl.StringVar(&opts.E2BSDK, "sdk", bench.DefaultE2BSDKDir(), "directory with node_modules/e2b (npm installs e2b@"+bench.E2BSDKVersion+" there when missing)")
	} else {
		fl.StringVar(&opts.Image, "image", bench.DefaultImage, "image of the sandboxes and baseline containers (agentbox's own images are built when missing)")
	}
	defRuns := "default per benchmark: exec %d, create %d, concurrent %d"
	if runs > 0 {
		defRuns = fmt.Sprint(runs)
	} else {
		defRuns = fmt.Sprintf(defRuns, bench.DefaultExecRuns, bench.DefaultCreateRuns, bench.DefaultConcurrentRuns)
	}
	fl.IntVarP(&opts.Runs, "runs", "n", 0, "measured runs per case ("+defRuns+")")
	if use == "concurrent" || use == "all" {
		fl.IntVar(&opts.Concurrency, "concurrency", bench.DefaultConcurrency, "sandboxes started at once")
	}
	if use == "exec" {
		fl.BoolVar(&opts.NoDockerExec, "no-docker-exec", false, "leave docker exec out of the rounds (its work in dockerd and containerd goes on after it returns, into the next case)")
	}
	if use == "create" || use == "all" {
		fl.IntVar(&opts.Profile, "profile", 0, "then time the daemon-side steps of this many instrumented create → first exec runs per backend")
	}
	fl.StringVar(&opts.Kubeconfig, "kubeconfig", "", "the kubernetes backend's cluster, measured when --backend names kubernetes (default: the config's kubernetes.kubeconfig, $AGENTBOX_KUBECONFIG)")
	fl.StringVar(&opts.GuestBinary, "guest", "", "agentbox-guest binary (default: the configured one, else next to agentbox)")
	return cmd
}

// benchGuest is the guest binary the daemon would use.
func benchGuest(cfg config.Config) string {
	if cfg.GuestBinary != "" {
		return cfg.GuestBinary
	}
	exe, err := os.Executable()
	if err != nil {
		return ""
	}
	return filepath.Join(filepath.Dir(exe), "agentbox-guest")
}
