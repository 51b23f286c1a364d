package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/agentbox/agentbox/client"
	"github.com/agentbox/agentbox/internal/apitypes"
	"github.com/agentbox/agentbox/internal/solve"
)

// solveReport is what `solve --json`, status and logs print: the run and
// its steps.
type solveReport struct {
	Run   client.SolveRun    `json:"run"`
	Steps []client.SolveStep `json:"steps"`
}

func (c *cli) solveCmd() *cobra.Command {
	var req client.SolveRequest
	var model string
	var detach bool
	cmd := &cobra.Command{
		Use:   "solve --repo URL --task TEXT --test CMD [--attempts K] [--model PROVIDER:MODEL]",
		Short: "Take a repository and a task to a reviewed candidate with the agent loop",
		Long: `Take a repository and a task to a candidate for review.

The daemon runs the loop, so it goes on if this command goes away: a
planner reads the task and the file list and makes a plan; a coder edits
files through the file tools; the executor runs --test in the workspace's
sandbox; on failure a debugger reads the output (bounded, redacted of
stored secrets, token formats and the daemon's paths, and labelled as
untrusted sandbox output) and says what to change; round again until the
tests pass or a limit stops it: a token, step, wall-clock or cost budget,
or the circuit breaker (the same failure or the same edit 3 times). Each
of --attempts K forks runs the loop side by side; each ends as a candidate
of the review gate (its tests run again in a fresh sandbox), ranked by
evidence. Nothing is merged or pushed.

  --model scripted:FILE            replies from a file (tests, demos)
  --model openai:gpt-4o-mini       OpenAI-compatible Chat Completions
  --model anthropic:claude-sonnet-4-5   Anthropic Messages

  agentbox solve status RUN    the run and its attempts
  agentbox solve logs RUN      every step: plan, patches, feedback, diagnoses
  agentbox solve cancel RUN`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, err := c.client()
			if err != nil {
				return err
			}
			req.Model = model
			if p, file, ok := strings.Cut(model, ":"); p == "scripted" {
				if !ok || file == "" {
					return fmt.Errorf("--model scripted:FILE: name the script file")
				}
				b, err := os.ReadFile(file)
				if err != nil {
					return fmt.Errorf("--model scripted:FILE: %w", err)
				}
				req.Model, req.Script = "scripted", string(b)
			}
			run, err := cl.Solve(cmd.Context(), req)
			if err != nil {
				return err
			}
			if detach {
				return c.emit(run, func(w io.Writer) { fmt.Fprintf(w, "solve run %s started; agentbox solve logs %s\n", run.ID, run.ID) })
			}
			if !c.json {
				fmt.Fprintf(c.stdout, "solve run %s (the daemon runs it: agentbox solve status|logs|cancel %s)\n", run.ID, run.ID)
			}
			rep, err := c.followSolve(cmd.Context(), cl, run.ID)
			if err != nil {
				return err
			}
			return c.emit(rep, func(w io.Writer) { printSolveSummary(w, rep.Run) })
		},
	}
	f := cmd.Flags()
	f.StringVar(&req.Repo, "repo", "", "the repository: a URL, a path, or a repo ID")
	f.StringVar(&req.Ref, "ref", "", "branch, tag or commit (default: the default branch)")
	f.StringVar(&req.Task, "task", "", "the problem statement")
	f.StringVar(&req.Test, "test", "", "the test command (sh -c): run after each edit, and by the review gate")
	f.IntVar(&req.Attempts, "attempts", 1, "forks running the loop side by side")
	f.StringVar(&model, "model", "", "PROVIDER:MODEL for every role (scripted:FILE, openai:MODEL, anthropic:MODEL)")
	f.StringToStringVar(&req.Models, "role-model", nil, "a role's own model: planner=openai:gpt-4o-mini,coder=...")
	f.StringVar(&req.Timeout, "timeout", "", "bound on each test run (default 10m)")
	f.IntVar(&req.Budget.Tokens, "max-tokens", 0, "token budget per attempt (default 500000)")
	f.IntVar(&req.Budget.Steps, "max-steps", 0, "step limit per attempt (default 40)")
	f.StringVar(&req.Budget.Wall, "max-wall", "", "wall-clock budget per attempt (default 30m)")
	f.Float64Var(&req.Budget.CostUSD, "max-cost", 0, "cost budget per attempt in USD (default none)")
	f.BoolVar(&detach, "detach", false, "start the run and return at once")
	for _, n := range []string{"repo", "task", "test"} {
		cmd.MarkFlagRequired(n)
	}
	cmd.AddCommand(c.solveStatusCmd(), c.solveLogsCmd(), c.solveCancelCmd())
	return cmd
}

// followSolve prints the run's steps as they come (without --json) until
// it is no longer running, and returns the run with all its steps.
func (c *cli) followSolve(ctx context.Context, cl *client.Client, id string) (solveReport, error) {
	// Steps come ordered by attempt, so a new one may land before those
	// shown: each is shown once by its place.
	shown := map[[2]int]bool{}
	for {
		run, err := cl.GetSolve(ctx, id)
		if err != nil {
			return solveReport{}, err
		}
		steps, err := cl.SolveSteps(ctx, id)
		if err != nil {
			return solveReport{}, err
		}
		if !c.json {
			for _, s := range steps {
				if k := [2]int{s.Attempt, s.Seq}; !shown[k] {
					shown[k] = true
					printSolveStep(c.stdout, s)
				}
			}
		}
		if run.State != apitypes.SolveRunning {
			return solveReport{Run: run, Steps: steps}, nil
		}
		select {
		case <-ctx.Done():
			return solveReport{}, ctx.Err()
		case <-time.After(300 * time.Millisecond):
		}
	}
}

func (c *cli) solveStatusCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "status RUN",
		Short: "A run's state, attempts (stop reason, budget used, failures, candidate) and best candidate",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, err := c.client()
			if err != nil {
				return err
			}
			run, err := cl.GetSolve(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			return c.emit(run, func(w io.Writer) { printSolveSummary(w, run) })
		},
	}
}

func (c *cli) solveLogsCmd() *cobra.Command {
	var follow bool
	cmd := &cobra.Command{
		Use:   "logs RUN [-f]",
		Short: "A run's steps: the plan, each patch, the feedback sent (redacted), each diagnosis, each stop and review",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, err := c.client()
			if err != nil {
				return err
			}
			if follow {
				rep, err := c.followSolve(cmd.Context(), cl, args[0])
				if err != nil {
					return err
				}
				return c.emit(rep, func(w io.Writer) { printSolveSummary(w, rep.Run) })
			}
			run, err := cl.GetSolve(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			steps, err := cl.SolveSteps(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			return c.emit(solveReport{Run: run, Steps: steps}, func(w io.Writer) {
				for _, s := range steps {
					printSolveStep(w, s)
				}
			})
		},
	}
	cmd.Flags().BoolVarP(&follow, "follow", "f", false, "follow the run until it ends")
	return cmd
}

func (c *cli) solveCancelCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "cancel RUN",
		Short: "Cancel a running run (its workspaces stay)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, err := c.client()
			if err != nil {
				return err
			}
			run, err := cl.CancelSolve(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			return c.emit(run, func(w io.Writer) { fmt.Fprintf(w, "solve run %s: %s\n", run.ID, run.State) })
		},
	}
}

// printSolveStep shows one step to a person.
func printSolveStep(w io.Writer, s client.SolveStep) {
	var rec solve.Record
	json.Unmarshal(s.Doc, &rec)
	at := fmt.Sprintf("[attempt %d]", s.Attempt)
	if s.Attempt == 0 {
		at = "[run]"
	}
	switch s.Kind {
	case "workspace", "forks", "done":
		var d struct {
			Workspace, Candidate string
			Forks                []string
		}
		json.Unmarshal(s.Doc, &d)
		switch s.Kind {
		case "workspace":
			fmt.Fprintf(w, "%s workspace %s\n", at, d.Workspace)
		case "forks":
			fmt.Fprintf(w, "%s attempts on forks %s\n", at, strings.Join(d.Forks, " "))
		default:
			fmt.Fprintf(w, "%s done: best candidate %s\n", at, d.Candidate)
		}
	case "review":
		var d struct {
			Candidate, Disposition string
			Findings               []string
		}
		json.Unmarshal(s.Doc, &d)
		fmt.Fprintf(w, "%s review: candidate %s %s\n", at, d.Candidate, strings.ToUpper(d.Disposition))
		for _, f := range d.Findings {
			fmt.Fprintf(w, "    blocked: %s\n", f)
		}
	case solve.KindPlan:
		var p solve.Plan
		json.Unmarshal(rec.Message, &p)
		fmt.Fprintf(w, "%s plan: look at %s\n    approach: %s\n", at, strings.Join(p.Files, ", "), p.Approach)
	case solve.KindPatch:
		var p solve.Patch
		json.Unmarshal(rec.Message, &p)
		fmt.Fprintf(w, "%s patch: %d edit(s)", at, len(p.Edits))
		if p.Turns > 1 {
			fmt.Fprintf(w, " after %d model calls reading the workspace", p.Turns-1)
		}
		fmt.Fprintln(w)
		for _, e := range p.Edits {
			if e.Old == "" {
				fmt.Fprintf(w, "    write %s (%d bytes)\n", e.Path, len(e.New))
			} else {
				fmt.Fprintf(w, "    edit %s: %q -> %q\n", e.Path, e.Old, e.New)
			}
		}
	case solve.KindApplied:
		var msg string
		json.Unmarshal(rec.Message, &msg)
		if msg != "" {
			fmt.Fprintf(w, "%s the patch did not apply: %s\n", at, msg)
		}
	case solve.KindExecution:
		var r solve.ExecutionResult
		json.Unmarshal(rec.Message, &r)
		if r.Passed {
			fmt.Fprintf(w, "%s tests passed: %s\n", at, r.Summary.Line)
			return
		}
		fmt.Fprintf(w, "%s tests FAILED: exit %d, %s, %s (signature %s, %d redaction(s))\n", at, r.ExitCode, r.Category, r.Summary.Line, r.Signature, r.Redactions)
		fmt.Fprintf(w, "    feedback sent (untrusted sandbox output, redacted, bounded):\n")
		for l := range strings.SplitSeq(strings.TrimRight(r.Output, "\n"), "\n") {
			fmt.Fprintf(w, "    | %s\n", l)
		}
	case solve.KindDiagnosis:
		var d solve.Diagnosis
		json.Unmarshal(rec.Message, &d)
		fmt.Fprintf(w, "%s diagnosis: %s\n    fix: %s\n", at, d.Hypothesis, d.Fix)
	case solve.KindStop:
		var st solve.Stop
		json.Unmarshal(rec.Message, &st)
		fmt.Fprintf(w, "%s stop: %s", at, st.Reason)
		if st.Detail != "" {
			fmt.Fprintf(w, " (%s)", st.Detail)
		}
		fmt.Fprintf(w, "; %d iteration(s), %d+%d tokens, $%.4f, %d model call(s)\n", st.Iterations, st.Usage.InputTokens, st.Usage.OutputTokens, st.Usage.CostUSD, st.Usage.Calls)
	default:
		fmt.Fprintf(w, "%s %s\n", at, s.Kind)
	}
}

// printSolveSummary shows a run's attempts, ranked.
func printSolveSummary(w io.Writer, run client.SolveRun) {
	fmt.Fprintf(w, "solve run %s: %s", run.ID, run.State)
	if run.Error != "" {
		fmt.Fprintf(w, ": %s", run.Error)
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "RANK\tATTEMPT\tWORKSPACE\tSTOP\tITER\tSTEPS\tTOKENS\tCOST\tCANDIDATE\tDISPOSITION")
	for _, a := range run.Attempts {
		fmt.Fprintf(tw, "%d\t%d\t%s\t%s\t%d\t%d\t%d\t$%.4f\t%s\t%s\n", a.Rank, a.N, a.Workspace, a.Stop, a.Iterations, a.Usage.Steps,
			a.Usage.InputTokens+a.Usage.OutputTokens, a.Usage.CostUSD, a.Candidate, a.Disposition)
	}
	tw.Flush()
	if run.Best != "" {
		fmt.Fprintf(w, "best candidate: %s (agentbox review %s; agentbox compare to see the attempts side by side)\n", run.Best, bestWS(run))
	}
}

func bestWS(run client.SolveRun) string {
	for _, a := range run.Attempts {
		if a.Candidate == run.Best {
			return a.Workspace
		}
	}
	return ""
}
