package main

import (
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/agentbox/agentbox/internal/config"
	"github.com/agentbox/agentbox/internal/image"
)

// The image commands run on this machine (as root), not through the
// daemon: they drive debootstrap and the container engine directly and
// leave root file systems in DATA/images/<kind>/rootfs for the local backend.
func (c *cli) imageCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "image", Short: "Build sandbox images without a registry"}
	cmd.AddCommand(c.imageBuildCmd(), c.imageLsCmd())
	return cmd
}

func (c *cli) imageBuildCmd() *cobra.Command {
	var opts image.BuildOptions
	var kind, dockerfile string
	cmd := &cobra.Command{
		Use:   "build --kind busybox|debian [--packages P1,P2] [--tag T] | --dockerfile PATH --tag T",
		Short: "Build an image from Debian packages or a Dockerfile, into the engine, and unpack its root for the local backend",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if dockerfile != "" {
				if kind != "" || len(opts.Packages) > 0 {
					return fmt.Errorf("image build: --dockerfile builds what the Dockerfile says; it takes no --kind or --packages")
				}
				dopts := image.DockerfileOptions{Dockerfile: dockerfile, Name: opts.Name}
				if !c.json {
					dopts.Progress = c.stderr
				}
				img, err := image.BuildDockerfile(cmd.Context(), dopts)
				if err != nil {
					return err
				}
				return c.emit(map[string]any{"id": img.Name, "image": img}, func(w io.Writer) {
					fmt.Fprintf(w, "built %s (%s, %s) from %s\n", img.Name, short(strings.TrimPrefix(img.ID, "sha256:")), humanBytes(img.SizeBytes), dockerfile)
				})
			}
			if kind == "" {
				return fmt.Errorf("image build: --kind busybox|debian or --dockerfile PATH is required")
			}
			cfg, err := config.Load("")
			if err != nil {
				return err
			}
			opts.Kind = image.Kind(kind)
			opts.RootfsDir = filepath.Join(cfg.DataDir, "images", kind, "rootfs")
			if len(opts.Packages) > 0 {
				// Engine only: the local backend unpacks it from the engine.
				// The debootstrap result is cached as the plain image's is.
				if opts.NoEngine {
					return fmt.Errorf("image build --packages: builds into the engine (the local backend unpacks it from there); --no-engine builds only the plain kinds")
				}
				opts.RootfsDir = ""
				opts.CacheDir = filepath.Join(cfg.DataDir, "images", kind, "cache")
			}
			if cfg.SandboxUID > 0 {
				opts.UID, opts.GID = cfg.SandboxUID, cfg.SandboxGID
			}
			if !c.json {
				opts.Progress = c.stderr
			}
			img, err := image.Build(cmd.Context(), opts)
			if err != nil {
				return err
			}
			return c.emit(map[string]any{"id": img.Name, "image": img}, func(w io.Writer) {
				fmt.Fprintf(w, "built %s (%s, %s)\nroot file system: %s\n", img.Name, short(strings.TrimPrefix(img.ID, "sha256:")), humanBytes(img.SizeBytes), img.Rootfs)
			})
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&kind, "kind", "", "busybox (seconds, for tests) or debian (git, python3, pytest, make, gcc, and --packages)")
	fl.StringVar(&opts.Name, "tag", "", "image reference (default agentbox/busybox:latest, agentbox/debian:bookworm, or agentbox/debian:bookworm-HASH with --packages)")
	fl.StringVar(&opts.Name, "name", "", "the same as --tag")
	fl.StringSliceVar(&opts.Packages, "packages", nil, "extra Debian packages for --kind debian, comma-separated (e.g. golang-go,nodejs,npm)")
	fl.StringVar(&opts.Mirror, "mirror", "", "Debian mirror (default: this host's apt sources)")
	fl.BoolVar(&opts.NoEngine, "no-engine", false, "only unpack the root file system (hosts without a container engine)")
	fl.BoolVar(&opts.Force, "force", false, "rebuild even if the image matches its recipe")
	fl.StringVar(&dockerfile, "dockerfile", "", "build from this Dockerfile (its directory is the context; FROM an image the engine has: nothing is pulled)")
	return cmd
}

func (c *cli) imageLsCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "ls",
		Short: "List the images in the engine and the unpacked ones, with the backends that can run each",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			cfg, err := config.Load("")
			if err != nil {
				return err
			}
			imgs, err := image.ListRunnable(cmd.Context(), cfg.DataDir, image.DefaultCache)
			if err != nil {
				return err
			}
			return c.emit(map[string]any{"images": imgs}, func(w io.Writer) {
				tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
				fmt.Fprintln(tw, "NAME\tKIND\tID\tSIZE\tBACKENDS\tLOCAL")
				for _, i := range imgs {
					local := "unpacks on first use"
					if i.LocalUnpacked {
						local = "unpacked"
					}
					if why := i.Why["local"]; why != "" {
						local = why
					}
					kind := string(i.Kind)
					if kind == "" {
						kind = "-"
					}
					fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", i.Name, kind, short(strings.TrimPrefix(i.ID, "sha256:")), humanBytes(i.SizeBytes), strings.Join(i.Backends, ","), local)
				}
				tw.Flush()
			})
		},
	}
}

func withImageIDs(imgs []image.Image) []image.Image {
	if imgs == nil {
		return []image.Image{}
	}
	return imgs
}
