package main

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/agentbox/agentbox/client"
	"github.com/agentbox/agentbox/internal/diffcheck"
	"github.com/agentbox/agentbox/internal/errdefs"
)

func (c *cli) wsCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "ws", Aliases: []string{"workspace"}, Short: "Durable workspaces: one per task"}
	cmd.AddCommand(c.wsCreateCmd(), c.wsLsCmd(), c.wsShowCmd(), c.wsRmCmd(), c.wsPathCmd(),
		c.wsStatusCmd(), c.wsDiffCmd(), c.wsCommitCmd(), c.wsForkCmd(), c.wsExportCmd(), c.wsPushCmd(), c.wsPRCmd(), c.wsDepsCmd())
	return cmd
}

func short(sha string) string {
	if len(sha) > 12 {
		return sha[:12]
	}
	return sha
}

func printWorkspace(w io.Writer, ws client.Workspace) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "id\t%s\nrepo\t%s\nref\t%s\nbase commit\t%s\nbranch\t%s\n", ws.ID, ws.RepoID, ws.Ref, ws.BaseCommit, ws.Branch)
	if ws.Task != "" {
		fmt.Fprintf(tw, "task\t%s\n", ws.Task)
	}
	if ws.ParentID != "" {
		fmt.Fprintf(tw, "forked from\t%s\n", ws.ParentID)
	}
	fmt.Fprintf(tw, "driver\t%s\nstate\t%s\ndirty\t%v\npath\t%s\n", ws.Driver, ws.State, ws.Dirty, ws.Path)
	if ws.DiskQuota > 0 {
		fmt.Fprintf(tw, "disk quota\t%s\n", humanBytes(ws.DiskQuota))
	} else {
		fmt.Fprintf(tw, "disk quota\tnone\n")
	}
	tw.Flush()
}

func (c *cli) wsCreateCmd() *cobra.Command {
	var req client.CreateWorkspace
	var from, disk string
	cmd := &cobra.Command{
		Use:   "create (--repo URL|ID [--ref REF] | --empty | --from DIR) [--branch NAME] [--task LABEL] [--driver overlay|copy] [--disk SIZE]",
		Short: "Create a workspace: of a repo at a ref (adding the repo if needed), empty, or from a local directory",
		Long: `Create a workspace on its own branch, from one of:

  --repo URL|ID [--ref REF]   a repo at a ref (the repo is cached first if needed)
  --empty                     a fresh repository with one empty commit, so that
                              diff and commit work from the first file on
  --from DIR                  the files under DIR on this machine, uploaded and
                              committed as the workspace's base commit (.git
                              directories, sockets, FIFOs and devices are left
                              out; symlinks are kept as symlinks; empty
                              directories are not kept)`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) (err error) {
			n := 0
			for _, set := range []bool{req.Repo != "", req.Empty, from != ""} {
				if set {
					n++
				}
			}
			switch {
			case n != 1:
				return errdefs.Invalid("give one of --repo, --empty or --from")
			case req.Ref != "" && req.Repo == "":
				return errdefs.Invalid("--ref needs --repo")
			}
			if req.Disk, err = sizeFlag("disk", disk); err != nil {
				return err
			}
			cl, err := c.client()
			if err != nil {
				return err
			}
			var ws client.Workspace
			if from != "" {
				ws, err = cl.UploadDir(cmd.Context(), req, from, func(p string) {
					fmt.Fprintf(c.stderr, "agentbox: left out %s (not a file, directory or symlink)\n", p)
				})
			} else {
				ws, err = cl.CreateWorkspace(cmd.Context(), req)
			}
			if err != nil {
				return err
			}
			return c.emit(ws, func(w io.Writer) {
				fmt.Fprintf(w, "created %s on branch %s at %s (%s)\n%s\n", ws.ID, ws.Branch, short(ws.BaseCommit), ws.Driver, ws.Path)
			})
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&req.Repo, "repo", "", "repo URL or ID")
	fl.StringVar(&req.Ref, "ref", "", "branch, tag or commit (default: the remote's default branch)")
	fl.BoolVar(&req.Empty, "empty", false, "a scratch workspace: a fresh repository with one empty commit")
	fl.StringVar(&from, "from", "", "upload this local directory as the workspace's base commit")
	fl.StringVar(&req.Branch, "branch", "", "the workspace's own branch (default agentbox/<id>)")
	fl.StringVar(&req.Task, "task", "", "a label for the task this workspace serves")
	fl.StringVar(&req.Driver, "driver", "", "overlay or copy (default: the daemon's)")
	fl.StringVar(&disk, "disk", "", `disk quota for what the workspace adds, as "2G" (default: the daemon's workspace_disk_quota)`)
	return cmd
}

func (c *cli) wsLsCmd() *cobra.Command {
	var repo, task string
	cmd := &cobra.Command{
		Use:   "ls",
		Short: "List workspaces",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, err := c.client()
			if err != nil {
				return err
			}
			wss, err := cl.ListWorkspaces(cmd.Context(), repo, task)
			if err != nil {
				return err
			}
			return c.emit(map[string]any{"workspaces": wss}, func(w io.Writer) {
				tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
				fmt.Fprintln(tw, "ID\tREPO\tBRANCH\tBASE\tTASK\tDRIVER\tSTATE\tDIRTY")
				for _, ws := range wss {
					fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%v\n", ws.ID, ws.RepoID, ws.Branch, short(ws.BaseCommit), ws.Task, ws.Driver, ws.State, ws.Dirty)
				}
				tw.Flush()
			})
		},
	}
	cmd.Flags().StringVar(&repo, "repo", "", "only workspaces of this repo (ID or URL)")
	cmd.Flags().StringVar(&task, "task", "", "only workspaces with this task label")
	return cmd
}

func (c *cli) wsShowCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "show WS",
		Short: "Show a workspace",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, err := c.client()
			if err != nil {
				return err
			}
			ws, err := cl.GetWorkspace(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			return c.emit(ws, func(w io.Writer) { printWorkspace(w, ws) })
		},
	}
}

func (c *cli) wsRmCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "rm WS",
		Short: "Remove a workspace and its files",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, err := c.client()
			if err != nil {
				return err
			}
			if err := cl.RemoveWorkspace(cmd.Context(), args[0]); err != nil {
				return err
			}
			return c.emit(map[string]any{"id": args[0], "removed": true}, func(w io.Writer) { fmt.Fprintf(w, "removed %s\n", args[0]) })
		},
	}
}

func (c *cli) wsPathCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "path WS",
		Short: "Print the host path of a workspace's files",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, err := c.client()
			if err != nil {
				return err
			}
			ws, err := cl.GetWorkspace(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			return c.emit(map[string]string{"id": ws.ID, "path": ws.Path}, func(w io.Writer) { fmt.Fprintln(w, ws.Path) })
		},
	}
}

func (c *cli) wsStatusCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "status WS",
		Short: "Show what changed since the base commit",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, err := c.client()
			if err != nil {
				return err
			}
			s, err := cl.Status(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			return c.emit(s, func(w io.Writer) {
				fmt.Fprintf(w, "workspace %s on branch %s at %s (base %s)\n", s.ID, s.Branch, short(s.Head), short(s.BaseCommit))
				if d := s.Disk; d != nil {
					fmt.Fprintf(w, "disk: %s used of %s (%s free), %d files (%d more fit)\n", humanBytes(d.Used), humanBytes(d.Quota), humanBytes(d.Free), d.Files, d.FilesFree)
				}
				if len(s.Changes) == 0 {
					fmt.Fprintln(w, "no changes since the base commit")
				}
				for _, ch := range s.Changes {
					fmt.Fprintf(w, "  %s %s\n", ch.Status, ch.Path)
				}
			})
		},
	}
}

func (c *cli) wsDiffCmd() *cobra.Command {
	var check bool
	var policyFile, format string
	cmd := &cobra.Command{
		Use:   "diff WS [PATH...] [--check [--policy FILE]] [--format unified|patch]",
		Short: "Print the unified diff against the base commit (new and deleted files included)",
		Long: `Print the unified diff against the base commit (new and deleted files included).

--check prints, instead of the diff, what would leave with it that should
not: changed paths outside the policy's writable_paths and added lines that
look like secrets (shown redacted), one line each, and exits 1 when there is
any. The policy is --policy FILE (JSON or YAML, "-": stdin), or else the
policy of the workspace's most recent sandbox.

--format patch prints, instead, one mbox of git format-patch messages from
the base commit, for git am: the commits agentbox made on the branch, then
the uncommitted change as one more. Commits made inside the sandbox with
its own git are folded into that last one (the host never reads the
sandbox's object store), and a note on stderr says so.`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if check {
				if format != "unified" {
					return errdefs.Invalid("--check checks the diff: no --format")
				}
				return c.wsDiffCheck(cmd, args, policyFile)
			}
			if policyFile != "" {
				return errdefs.Invalid("--policy is only used with --check")
			}
			cl, err := c.client()
			if err != nil {
				return err
			}
			switch format {
			case "unified":
			case "patch":
				if len(args) > 1 {
					return errdefs.Invalid("--format patch is of the whole workspace: no paths")
				}
				d, err := cl.Patch(cmd.Context(), args[0])
				if err != nil {
					return err
				}
				if d.Note != "" && !c.json {
					fmt.Fprintf(c.stderr, "agentbox: %s: %s\n", d.ID, d.Note)
				}
				return c.emit(d, func(w io.Writer) { io.WriteString(w, d.Diff) })
			default:
				return errdefs.Invalid("--format %q is not unified or patch", format)
			}
			d, err := cl.Diff(cmd.Context(), args[0], args[1:]...)
			if err != nil {
				return err
			}
			return c.emit(d, func(w io.Writer) { io.WriteString(w, d.Diff) })
		},
	}
	cmd.Flags().BoolVar(&check, "check", false, "check the diff for paths outside the writable paths and for secrets; exit 1 if any")
	cmd.Flags().StringVar(&format, "format", "unified", "unified, or patch: an mbox of git format-patch messages for git am")
	cmd.Flags().StringVar(&policyFile, "policy", "", `with --check: the policy whose writable_paths apply, JSON or YAML ("-": stdin)`)
	return cmd
}

// wsDiffCheck runs ws diff --check: the report, and exit status 1 when it
// found anything, so that a script can stop a result from leaving.
func (c *cli) wsDiffCheck(cmd *cobra.Command, args []string, policyFile string) error {
	if len(args) > 1 {
		return errdefs.Invalid("--check checks the whole workspace: no paths")
	}
	// Read and checked here, so a mistake names its field before the
	// daemon is asked.
	pol, err := c.sandboxPolicy(policyFile, nil)
	if err != nil {
		return err
	}
	cl, err := c.client()
	if err != nil {
		return err
	}
	r, err := cl.CheckDiff(cmd.Context(), args[0], pol)
	if err != nil {
		return err
	}
	err = c.emit(r, func(w io.Writer) {
		for _, f := range r.OutsideWritable {
			fmt.Fprintf(w, "%s: %s outside the writable paths", f.Path, changeWord(f.Status))
			switch {
			case f.RenamedFrom != "":
				fmt.Fprintf(w, " (renamed from %s)", f.RenamedFrom)
			case f.RenamedTo != "":
				fmt.Fprintf(w, " (renamed to %s)", f.RenamedTo)
			}
			fmt.Fprintln(w)
		}
		for _, s := range r.Secrets {
			fmt.Fprintf(w, "%s:%d:%d: %s %s\n", s.Path, s.Line, s.Column, s.Kind, s.Excerpt)
		}
		if r.Truncated {
			fmt.Fprintln(w, "(more findings not shown: the report was cut short)")
		}
		if r.OK {
			fmt.Fprintf(w, "%s: no changed path outside the writable paths, no secret in the added lines\n", r.ID)
		}
	})
	if err != nil {
		return err
	}
	if !r.OK {
		if !c.json {
			fmt.Fprintf(c.stderr, "agentbox: %s: %d path(s) outside the writable paths, %d possible secret(s)\n", r.ID, len(r.OutsideWritable), len(r.Secrets))
		}
		return exitError{code: 1}
	}
	return nil
}

// changeWord says what a change status did to a path.
func changeWord(status string) string {
	switch status {
	case "A":
		return "added"
	case "D":
		return "deleted"
	case "R":
		return "renamed"
	case "T":
		return "type changed"
	}
	return "modified"
}

func (c *cli) wsCommitCmd() *cobra.Command {
	var msg, name, email string
	var force bool
	cmd := &cobra.Command{
		Use:   "commit WS -m MESSAGE [--force]",
		Short: "Commit every change on the workspace's branch",
		Long: `Commit every change on the workspace's branch.

The tree to be committed is checked first, as ws diff --check checks it
(paths outside the writable paths of the workspace's latest sandbox policy,
added lines that look like secrets, stored secret values): a commit that
fails the check is refused, naming each finding (secrets redacted).
--force commits it anyway; the event log records that it was forced and
what was found.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, err := c.client()
			if err != nil {
				return err
			}
			var author *client.Author
			if name != "" || email != "" {
				author = &client.Author{Name: name, Email: email}
			}
			r, err := cl.CommitWith(cmd.Context(), args[0], client.CommitRequest{Message: msg, Author: author, Force: force})
			if err != nil {
				return err
			}
			if r.Forced && !c.json {
				fmt.Fprintf(c.stderr, "agentbox: %s: committed with --force despite the check: %s\n", r.ID, diffcheck.Summary(*r.Findings, 20))
			}
			return c.emit(r, func(w io.Writer) { fmt.Fprintf(w, "[%s %s] %s\n", r.Branch, short(r.Commit), firstLine(msg)) })
		},
	}
	cmd.Flags().StringVarP(&msg, "message", "m", "", "commit message (required)")
	cmd.Flags().BoolVar(&force, "force", false, "commit a diff that fails the check (recorded in the event log)")
	cmd.Flags().StringVar(&name, "author-name", "", "author name (default: the daemon's)")
	cmd.Flags().StringVar(&email, "author-email", "", "author email (default: the daemon's)")
	cmd.MarkFlagRequired("message")
	return cmd
}

func (c *cli) wsExportCmd() *cobra.Command {
	var file string
	cmd := &cobra.Command{
		Use:   "export WS --bundle FILE",
		Short: "Write the workspace's branch as a git bundle",
		Long: `Write the workspace's branch as a git bundle ("-": standard output).

The bundle holds the commits agentbox made on the branch since the base
commit, then the uncommitted change as one more; the base commit is its
prerequisite, so fetch it into a clone that has that commit:

  git fetch FILE BRANCH:BRANCH

It is made by host-side git from the host-private git directory, confined
like every host-side git over a workspace.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if file == "" {
				return errdefs.Invalid("--bundle FILE is required")
			}
			cl, err := c.client()
			if err != nil {
				return err
			}
			if file == "-" {
				_, err := cl.Bundle(cmd.Context(), args[0], c.stdout)
				return err
			}
			tmp, err := os.CreateTemp(filepath.Dir(file), "."+filepath.Base(file)+".tmp-")
			if err != nil {
				return err
			}
			defer os.Remove(tmp.Name())
			info, err := cl.Bundle(cmd.Context(), args[0], tmp)
			if err == nil {
				err = tmp.Sync()
			}
			if cerr := tmp.Close(); err == nil {
				err = cerr
			}
			if err == nil {
				err = os.Rename(tmp.Name(), file)
			}
			if err != nil {
				return fmt.Errorf("writing the bundle to %s: %w", file, err)
			}
			if info.Note != "" && !c.json {
				fmt.Fprintf(c.stderr, "agentbox: %s: %s\n", info.ID, info.Note)
			}
			return c.emit(struct {
				client.BundleInfo
				File string `json:"file"`
			}{info, file}, func(w io.Writer) {
				fmt.Fprintf(w, "wrote %s (%d bytes): branch %s at %s, from %s\nfetch it with: git fetch %s %s:%s\n",
					file, info.Bytes, info.Branch, short(info.Tip), short(info.Base), file, info.Branch, info.Branch)
			})
		},
	}
	cmd.Flags().StringVar(&file, "bundle", "", `the bundle file to write ("-": standard output)`)
	return cmd
}

func firstLine(s string) string {
	for i, r := range s {
		if r == '\n' {
			return s[:i]
		}
	}
	return s
}

func (c *cli) wsForkCmd() *cobra.Command {
	var req client.Fork
	var disk string
	var n int
	cmd := &cobra.Command{
		Use:   "fork WS [-n N] [--branch NAME] [--task LABEL] [--disk SIZE]",
		Short: "Fork a workspace (copies only its own changes) for a parallel attempt",
		Long: `Fork a workspace (copies only its own changes) for a parallel attempt.

-n N makes N forks at once (1 to 16), all or none; with --branch, fork i is
on BRANCH-i. With -n, --json prints {"parent": WS, "forks": [...]}.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) (err error) {
			if req.Disk, err = sizeFlag("disk", disk); err != nil {
				return err
			}
			cl, err := c.client()
			if err != nil {
				return err
			}
			if cmd.Flags().Changed("n") {
				l, err := cl.ForkN(cmd.Context(), args[0], client.Forks{ForkRequest: req, Count: n})
				if err != nil {
					return err
				}
				return c.emit(l, func(w io.Writer) {
					for _, ws := range l.Forks {
						fmt.Fprintf(w, "forked %s from %s on branch %s\n%s\n", ws.ID, args[0], ws.Branch, ws.Path)
					}
				})
			}
			ws, err := cl.Fork(cmd.Context(), args[0], req)
			if err != nil {
				return err
			}
			return c.emit(ws, func(w io.Writer) {
				fmt.Fprintf(w, "forked %s from %s on branch %s\n%s\n", ws.ID, args[0], ws.Branch, ws.Path)
			})
		},
	}
	cmd.Flags().IntVarP(&n, "n", "n", 1, "how many forks to make at once (1 to 16), all or none")
	cmd.Flags().StringVar(&req.Branch, "branch", "", "the fork's branch (default agentbox/<id>)")
	cmd.Flags().StringVar(&req.Task, "task", "", "task label (default: the parent's)")
	cmd.Flags().StringVar(&disk, "disk", "", "the fork's disk quota (default: the parent's)")
	return cmd
}
