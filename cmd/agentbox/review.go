package main

import (
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/agentbox/agentbox/client"
	"github.com/agentbox/agentbox/internal/apitypes"
)

func (c *cli) reviewCmd() *cobra.Command {
	var req client.ReviewRequest
	var fresh bool
	cmd := &cobra.Command{
		Use:   "review WS [--test CMD] [--regress CMD] [--timeout D] [--json]",
		Short: "Make or show a workspace's candidate: its result with the evidence agentbox gathered",
		Long: `Make or show a workspace's candidate.

With --test or --regress, review makes a candidate: the workspace's files
as a commit on its branch (committed now if they are not yet), and the
evidence agentbox gathers itself, never what the agent says: the test and
regression commands (sh -c), each run in a fresh sandbox on a fork holding
exactly that commit; the diff check (paths outside the writable paths,
secrets); the diff's stats. It is blocked, naming each failed check, or
ready for a person to approve. Without them, review shows the newest
candidate, or makes one (--new: always) with the commands of the repo's
.agentbox.yaml as of the workspace's base commit, which the agent cannot
change:

  review:
    test: python3 -m pytest -q
    regress: make lint
    timeout: 15m

  agentbox review approve CAND --reason TEXT
  agentbox review reject CAND --reason TEXT

--json prints the candidate: id, disposition (blocked, ready, approved,
rejected), findings and evidence.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, err := c.client()
			if err != nil {
				return err
			}
			var cand client.Candidate
			if req.Test == "" && req.Regress == "" && !fresh {
				cs, err := cl.Candidates(cmd.Context(), args[0])
				if err != nil {
					return err
				}
				if len(cs) > 0 {
					cand = cs[0]
				}
			}
			if cand.ID == "" {
				if cand, err = cl.Review(cmd.Context(), args[0], req); err != nil {
					return err
				}
			}
			return c.emit(cand, func(w io.Writer) { printCandidate(w, cand) })
		},
	}
	cmd.Flags().StringVar(&req.Test, "test", "", "the task's test command (sh -c), run in a fresh sandbox on the candidate")
	cmd.Flags().StringVar(&req.Regress, "regress", "", "the regression command (sh -c), run the same way")
	cmd.Flags().StringVar(&req.Timeout, "timeout", "", "bound on each command (default 10m)")
	cmd.Flags().StringVarP(&req.Message, "message", "m", "", "commit message if the files are not committed yet (default: the task)")
	cmd.Flags().BoolVar(&fresh, "new", false, "make a new candidate even without --test or --regress (the commands then come from the repo's .agentbox.yaml)")
	cmd.AddCommand(c.decideCmd(true), c.decideCmd(false))
	return cmd
}

func (c *cli) decideCmd(approve bool) *cobra.Command {
	var reason, actor string
	verb := "reject"
	if approve {
		verb = "approve"
	}
	cmd := &cobra.Command{
		Use:   verb + " CAND --reason TEXT",
		Short: map[bool]string{true: "Approve a ready candidate (a blocked one is refused with its findings)", false: "Reject a candidate"}[approve],
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, err := c.client()
			if err != nil {
				return err
			}
			cand, err := cl.Decide(cmd.Context(), args[0], approve, actor, reason)
			if err != nil {
				return err
			}
			return c.emit(cand, func(w io.Writer) { printCandidate(w, cand) })
		},
	}
	cmd.Flags().StringVar(&reason, "reason", "", "why (required; recorded in the event log)")
	cmd.Flags().StringVar(&actor, "actor", os.Getenv("USER"), "who decides (default $USER)")
	cmd.MarkFlagRequired("reason")
	return cmd
}

// printCandidate shows a candidate and its evidence to a person.
func printCandidate(w io.Writer, c client.Candidate) {
	fmt.Fprintf(w, "candidate %s of %s: %s\n", c.ID, c.WorkspaceID, strings.ToUpper(c.Disposition))
	fmt.Fprintf(w, "  commit %s on %s (base %s)\n", short(c.Commit), c.Branch, short(c.BaseCommit))
	s := c.Evidence.Stats
	fmt.Fprintf(w, "  change: %d file(s), +%d -%d\n", s.Files, s.Insertions, s.Deletions)
	for _, ev := range []struct {
		name string
		e    *apitypes.CommandEvidence
	}{{"tests", c.Evidence.Tests}, {"regression", c.Evidence.Regress}} {
		if ev.e == nil {
			continue
		}
		res := "passed"
		if !ev.e.Passed {
			res = "FAILED: " + failureWord(ev.e)
		}
		fmt.Fprintf(w, "  %s: %s (%s, %s)\n", ev.name, res, ev.e.Command, time.Duration(ev.e.DurationMS)*time.Millisecond)
	}
	if c.Evidence.Check.OK {
		fmt.Fprintln(w, "  check: no path outside the writable paths, no secret")
	}
	if c.Evidence.Note != "" {
		fmt.Fprintf(w, "  note: %s\n", c.Evidence.Note)
	}
	for _, f := range c.Findings {
		fmt.Fprintf(w, "  blocked: %s\n", f)
	}
	if d := c.Decision; d != nil {
		fmt.Fprintf(w, "  %s by %s: %s\n", d.Disposition, d.Actor, d.Reason)
	}
	if p := c.Push; p != nil {
		fmt.Fprintf(w, "  pushed %s to %s %s\n", short(p.Commit), p.Remote, p.Branch)
	}
	if p := c.PR; p != nil {
		fmt.Fprintf(w, "  pull request #%d: %s\n", p.Number, p.URL)
	}
}

func failureWord(e *apitypes.CommandEvidence) string {
	switch {
	case e.TimedOut:
		return "timed out"
	case e.OOM:
		return "out of memory"
	case e.Signal != 0:
		return fmt.Sprintf("signal %d", e.Signal)
	}
	return fmt.Sprintf("exit %d", e.ExitCode)
}

func (c *cli) wsPushCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "push WS",
		Short: "Push the workspace's newest approved candidate to its repo's remote",
		Long: `Push the workspace's newest approved candidate to its repo's remote, on the
branch agentbox/<task>/<workspace>.

The push runs on the host, never in the sandbox, from agentbox's own copy
of the candidate's commit, with the token of the forge bound to the
remote's host (agentbox forge set), which no sandbox ever sees. It is never
forced and never goes to the remote's default branch or a protected one.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, err := c.client()
			if err != nil {
				return err
			}
			cand, err := cl.Push(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			return c.emit(cand, func(w io.Writer) {
				fmt.Fprintf(w, "pushed %s (candidate %s) to %s %s\n", short(cand.Push.Commit), cand.ID, cand.Push.Remote, cand.Push.Branch)
			})
		},
	}
}

func (c *cli) wsPRCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "pr WS",
		Short: "Push the workspace's newest approved candidate and open its pull request",
		Long: `Push the workspace's newest approved candidate (as ws push does), then open a
pull request for its branch on the forge bound to the remote's host (agentbox
forge set), or update the open one of that branch: the title is the task,
the body the evidence agentbox gathered, the label agentbox. The PR's number
and URL are recorded on the candidate.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, err := c.client()
			if err != nil {
				return err
			}
			cand, err := cl.PullRequest(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			return c.emit(cand, func(w io.Writer) {
				verb := "opened"
				if cand.PR.Updated {
					verb = "updated"
				}
				fmt.Fprintf(w, "%s pull request #%d: %s\n", verb, cand.PR.Number, cand.PR.URL)
			})
		},
	}
}

func (c *cli) forgeCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "forge", Short: "Forge hosts agentbox pushes to and opens pull requests on"}
	var f client.ForgeBinding
	var protected []string
	set := &cobra.Command{
		Use:   "set HOST --kind github|gitlab|gitea --secret NAME [--api URL] [--user NAME] [--protected PATTERN,...]",
		Short: "Bind a forge host to its API kind and the stored secret with its token",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, err := c.client()
			if err != nil {
				return err
			}
			f.Host, f.Protected = args[0], protected
			out, err := cl.SetForge(cmd.Context(), f)
			if err != nil {
				return err
			}
			return c.emit(out, func(w io.Writer) {
				fmt.Fprintf(w, "forge %s: %s, token in secret %s\n", out.Host, out.Kind, out.Secret)
			})
		},
	}
	set.Flags().StringVar(&f.Kind, "kind", "", "the forge's API: github, gitlab or gitea (also Forgejo)")
	set.Flags().StringVar(&f.Secret, "secret", "", "the stored secret holding the token (agentbox secret set NAME)")
	set.Flags().StringVar(&f.APIURL, "api", "", "the API base URL (default: the kind's for the host)")
	set.Flags().StringVar(&f.User, "user", "", "the user name git sends with the token (default x-access-token)")
	set.Flags().StringSliceVar(&protected, "protected", nil, "branch patterns never pushed to, besides the remote's default branch")
	set.MarkFlagRequired("kind")
	set.MarkFlagRequired("secret")
	ls := &cobra.Command{
		Use:   "ls",
		Short: "List the forge bindings",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, err := c.client()
			if err != nil {
				return err
			}
			fs, err := cl.Forges(cmd.Context())
			if err != nil {
				return err
			}
			return c.emit(struct {
				Forges []client.ForgeBinding `json:"forges"`
			}{fs}, func(w io.Writer) {
				for _, f := range fs {
					fmt.Fprintf(w, "%s\t%s\tsecret %s\n", f.Host, f.Kind, f.Secret)
				}
			})
		},
	}
	rm := &cobra.Command{
		Use:   "rm HOST",
		Short: "Drop a forge binding (the secret stays)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, err := c.client()
			if err != nil {
				return err
			}
			if err := cl.RemoveForge(cmd.Context(), args[0]); err != nil {
				return err
			}
			return c.emit(map[string]any{"id": args[0], "removed": true}, func(w io.Writer) { fmt.Fprintf(w, "removed forge %s\n", args[0]) })
		},
	}
	cmd.AddCommand(set, ls, rm)
	return cmd
}

// comparison is one workspace's row of agentbox compare.
type comparison struct {
	Workspace   string `json:"workspace"`
	Candidate   string `json:"candidate,omitempty"`
	Disposition string `json:"disposition,omitempty"`
	// Tests and Regress are "passed", "failed", or "" when not run.
	Tests      string `json:"tests,omitempty"`
	Regress    string `json:"regress,omitempty"`
	Findings   int    `json:"findings"`
	Files      int    `json:"files"`
	Insertions int    `json:"insertions"`
	Deletions  int    `json:"deletions"`
	WallMS     int64  `json:"wall_ms"`
	CPUMS      int64  `json:"cpu_ms"`
	// Tokens are the model tokens the agent loop spent, when it made the
	// candidate; 0 otherwise.
	Tokens int64 `json:"tokens"`
	// Note says why a row is empty (no candidate yet).
	Note string `json:"note,omitempty"`
}

func (c *cli) compareCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "compare WS... [--json]",
		Short: "Compare the newest candidates of several workspaces (parallel attempts) side by side",
		Long: `Compare the newest candidate of each workspace, side by side: its
disposition, tests and regression (passed or failed), the findings that
block it, files and lines changed, and the wall and CPU time of its
evidence commands. --json prints {"candidates": [...]} in the order given.`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, err := c.client()
			if err != nil {
				return err
			}
			rows := make([]comparison, 0, len(args))
			for _, ws := range args {
				cs, err := cl.Candidates(cmd.Context(), ws)
				if err != nil {
					return err
				}
				r := comparison{Workspace: ws}
				if len(cs) == 0 {
					r.Note = "no candidate: agentbox review " + ws + " --test CMD"
					rows = append(rows, r)
					continue
				}
				cand := cs[0]
				r.Candidate, r.Disposition, r.Findings = cand.ID, cand.Disposition, len(cand.Findings)
				s := cand.Evidence.Stats
				r.Files, r.Insertions, r.Deletions = s.Files, s.Insertions, s.Deletions
				for _, ev := range []struct {
					e   *apitypes.CommandEvidence
					out *string
				}{{cand.Evidence.Tests, &r.Tests}, {cand.Evidence.Regress, &r.Regress}} {
					if ev.e == nil {
						continue
					}
					*ev.out = "failed"
					if ev.e.Passed {
						*ev.out = "passed"
					}
					r.WallMS += ev.e.DurationMS
					r.CPUMS += ev.e.CPUMS
				}
				rows = append(rows, r)
			}
			return c.emit(struct {
				Candidates []comparison `json:"candidates"`
			}{rows}, func(w io.Writer) {
				tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
				fmt.Fprintln(tw, "WORKSPACE\tCANDIDATE\tDISPOSITION\tTESTS\tREGRESS\tFINDINGS\tFILES\t+/-\tWALL\tCPU")
				dash := func(s string) string {
					if s == "" {
						return "-"
					}
					return s
				}
				for _, r := range rows {
					if r.Candidate == "" {
						fmt.Fprintf(tw, "%s\t-\t(%s)\t\t\t\t\t\t\t\n", r.Workspace, r.Note)
						continue
					}
					fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d\t%d\t+%d -%d\t%s\t%s\n", r.Workspace, r.Candidate, r.Disposition, dash(r.Tests), dash(r.Regress),
						r.Findings, r.Files, r.Insertions, r.Deletions, time.Duration(r.WallMS)*time.Millisecond, time.Duration(r.CPUMS)*time.Millisecond)
				}
				tw.Flush()
			})
		},
	}
}
