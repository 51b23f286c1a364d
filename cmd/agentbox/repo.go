package main

import (
	"fmt"
	"io"
	"os"
	"text/tabwriter"

	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/agentbox/agentbox/client"
)

func (c *cli) repoCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "repo", Short: "The repo cache: clone once, reuse"}
	cmd.AddCommand(c.repoAddCmd(), c.repoLsCmd(), c.repoShowCmd(), c.repoFetchCmd(), c.repoRmCmd())
	return cmd
}

// progress returns a progress printer when stderr is a terminal and output
// is for a person; nil otherwise.
func (c *cli) progress() func(string) {
	f, ok := c.stderr.(*os.File)
	if c.json || !ok || !term.IsTerminal(int(f.Fd())) {
		return nil
	}
	return func(line string) { fmt.Fprintf(c.stderr, "\r\033[K%s", line) }
}

func (c *cli) endProgress(p func(string)) {
	if p != nil {
		fmt.Fprint(c.stderr, "\r\033[K")
	}
}

func printRepo(w io.Writer, r client.Repo) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "id\t%s\nurl\t%s\ndefault branch\t%s\nsize\t%s\nlast fetch\t%s\nmirror\t%s\n",
		r.ID, r.URL, r.DefaultBranch, humanBytes(r.SizeBytes), r.LastFetchAt.Local().Format("2006-01-02 15:04:05"), r.Path)
	tw.Flush()
}

func (c *cli) repoAddCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "add URL",
		Short: "Clone a repo into the cache (https, ssh, file://, local path); credentials in the URL are never stored",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, err := c.client()
			if err != nil {
				return err
			}
			p := c.progress()
			r, err := cl.AddRepo(cmd.Context(), args[0], p)
			c.endProgress(p)
			if err != nil {
				return err
			}
			return c.emit(r, func(w io.Writer) {
				verb := "cached"
				if r.Cloned {
					verb = "cloned"
				}
				fmt.Fprintf(w, "%s %s (%s, %s)\n", verb, r.ID, r.URL, humanBytes(r.SizeBytes))
			})
		},
	}
}

func (c *cli) repoLsCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "ls",
		Short: "List cached repos",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, err := c.client()
			if err != nil {
				return err
			}
			repos, err := cl.ListRepos(cmd.Context())
			if err != nil {
				return err
			}
			return c.emit(map[string]any{"repos": repos}, func(w io.Writer) {
				tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
				fmt.Fprintln(tw, "ID\tURL\tSIZE\tLAST FETCH")
				for _, r := range repos {
					fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", r.ID, r.URL, humanBytes(r.SizeBytes), r.LastFetchAt.Local().Format("2006-01-02 15:04"))
				}
				tw.Flush()
			})
		},
	}
}

func (c *cli) repoShowCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "show REPO",
		Short: "Show a cached repo (ID or URL)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, err := c.client()
			if err != nil {
				return err
			}
			r, err := cl.GetRepo(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			return c.emit(r, func(w io.Writer) { printRepo(w, r) })
		},
	}
}

func (c *cli) repoFetchCmd() *cobra.Command {
	var url string
	cmd := &cobra.Command{
		Use:   "fetch REPO",
		Short: "Fetch a cached repo's remote",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, err := c.client()
			if err != nil {
				return err
			}
			p := c.progress()
			r, err := cl.FetchRepo(cmd.Context(), args[0], url, p)
			c.endProgress(p)
			if err != nil {
				return err
			}
			return c.emit(r, func(w io.Writer) { fmt.Fprintf(w, "fetched %s (%s)\n", r.ID, humanBytes(r.SizeBytes)) })
		},
	}
	cmd.Flags().StringVar(&url, "url", "", "the repo URL with credentials, used for this fetch only")
	return cmd
}

func (c *cli) repoRmCmd() *cobra.Command {
	var force bool
	cmd := &cobra.Command{
		Use:   "rm REPO",
		Short: "Remove a repo from the cache (refused while workspaces use it)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, err := c.client()
			if err != nil {
				return err
			}
			id, err := cl.RemoveRepo(cmd.Context(), args[0], force)
			if err != nil {
				return err
			}
			return c.emit(map[string]any{"id": id, "removed": true}, func(w io.Writer) { fmt.Fprintf(w, "removed %s\n", id) })
		},
	}
	cmd.Flags().BoolVar(&force, "force", false, "also remove the workspaces that use it")
	return cmd
}

func humanBytes(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}
