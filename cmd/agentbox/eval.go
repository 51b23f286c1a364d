package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"sigs.k8s.io/yaml"

	"github.com/agentbox/agentbox/client"
	"github.com/agentbox/agentbox/internal/apitypes"
	"github.com/agentbox/agentbox/internal/evalset"
)

// evalTask is one task of a task set: a repository at a base, a problem
// statement, the tests that must go from failing to passing and those
// that must keep passing, and the reference patch.
type evalTask struct {
	ID          string   `json:"id"`
	Repo        string   `json:"repo"`
	Base        string   `json:"base"`
	Problem     string   `json:"problem"`
	FailToPass  []string `json:"fail_to_pass"`
	PassToPass  []string `json:"pass_to_pass"`
	Patch       string   `json:"patch"`
	Script      string   `json:"script,omitempty"`
	TestTimeout string   `json:"timeout,omitempty"`
	// TestPatch, a file, holds tests applied to the workspace after the
	// patch under evaluation and before the tests run, SWE-bench style:
	// the agent never sees them.
	TestPatch string `json:"test_patch,omitempty"`
	// GoModule makes the task from a recipe instead of Repo, Base and
	// Patch: a bug fixed by a patch release of a Go module, rebuilt from
	// the module proxy's zips (see internal/evalset). Its fail_to_pass
	// and pass_to_pass are Go test names, run in Packages (default
	// ./...).
	GoModule *evalset.GoModule `json:"go_module,omitempty"`
	Packages []string          `json:"packages,omitempty"`

	// patchText and testPatchText are a recipe's patches, once built.
	patchText, testPatchText string
}

// commands are the shell commands of a task's fail_to_pass and
// pass_to_pass tests.
func (t evalTask) commands() (test, regress string, err error) {
	if t.GoModule == nil {
		return strings.Join(t.FailToPass, " && "), strings.Join(t.PassToPass, " && "), nil
	}
	if test, err = evalset.GoTest(t.FailToPass, t.Packages); err != nil {
		return "", "", err
	}
	if len(t.PassToPass) > 0 {
		if regress, err = evalset.GoTest(t.PassToPass, t.Packages); err != nil {
			return "", "", err
		}
	}
	return test, regress, nil
}

type evalSet struct {
	Tasks []evalTask `json:"tasks"`
}

// evalResult is one task's outcome.
type evalResult struct {
	ID       string `json:"id"`
	Resolved bool   `json:"resolved"`
	// FailToPass and PassToPass say whether each group passed.
	FailToPass bool   `json:"fail_to_pass"`
	PassToPass bool   `json:"pass_to_pass"`
	Failure    string `json:"failure,omitempty"`
	Workspace  string `json:"workspace,omitempty"`
	Candidate  string `json:"candidate,omitempty"`
	// SolveRun, Attempts, Tokens and CostUSD are set with --patch solve.
	SolveRun string             `json:"solve_run,omitempty"`
	Attempts int                `json:"attempts,omitempty"`
	Tokens   int                `json:"tokens,omitempty"`
	CostUSD  float64            `json:"cost_usd,omitempty"`
	Failures map[string]int     `json:"failure_categories,omitempty"`
	WallMS   int64              `json:"wall_ms"`
	Stop     string             `json:"stop,omitempty"`
	Evidence *apitypes.Evidence `json:"evidence,omitempty"`
}

// evalReport is what eval prints.
type evalReport struct {
	Patch    string       `json:"patch"`
	Resolved int          `json:"resolved"`
	Total    int          `json:"total"`
	Rate     float64      `json:"rate"`
	Tasks    []evalResult `json:"tasks"`
	// WallMS is the time distribution over tasks.
	WallMS struct {
		Min, Median, Max int64
	} `json:"wall_ms"`
	Tokens   int            `json:"tokens"`
	CostUSD  float64        `json:"cost_usd"`
	Failures map[string]int `json:"failure_categories"`
}

func loadEvalSet(file string) (evalSet, string, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return evalSet{}, "", err
	}
	var s evalSet
	if err := yaml.UnmarshalStrict(b, &s); err != nil {
		return evalSet{}, "", fmt.Errorf("task set %s: %w", file, err)
	}
	if len(s.Tasks) == 0 {
		return evalSet{}, "", fmt.Errorf("task set %s has no tasks", file)
	}
	dir, err := filepath.Abs(filepath.Dir(file))
	if err != nil {
		return evalSet{}, "", err
	}
	seen := map[string]bool{}
	for _, t := range s.Tasks {
		switch {
		case t.ID == "" || seen[t.ID]:
			return evalSet{}, "", fmt.Errorf("task set %s: a task without an id, or %q twice", file, t.ID)
		case t.GoModule != nil && (t.Repo != "" || t.Base != "" || t.Patch != "" || t.TestPatch != ""):
			return evalSet{}, "", fmt.Errorf("task set %s: task %s is a go_module recipe: it has no repo, base, patch or test_patch of its own", file, t.ID)
		case t.GoModule == nil && len(t.Packages) > 0:
			return evalSet{}, "", fmt.Errorf("task set %s: task %s: packages are for go_module tasks", file, t.ID)
		case (t.Repo == "" && t.GoModule == nil) || len(t.FailToPass) == 0:
			return evalSet{}, "", fmt.Errorf("task set %s: task %s needs repo (or go_module) and fail_to_pass", file, t.ID)
		}
		if t.GoModule != nil {
			if err := t.GoModule.Check(); err != nil {
				return evalSet{}, "", fmt.Errorf("task set %s: task %s: %w", file, t.ID, err)
			}
		}
		if _, _, err := t.commands(); err != nil {
			return evalSet{}, "", fmt.Errorf("task set %s: task %s: %w", file, t.ID, err)
		}
		seen[t.ID] = true
	}
	return s, dir, nil
}

func (c *cli) evalCmd() *cobra.Command {
	var patch, model string
	var parallel, attempts int
	var keep bool
	cmd := &cobra.Command{
		Use:   "eval TASKS --patch reference|empty|solve [--json]",
		Short: "Evaluate patches or the agent loop on a task set (SWE-bench style): the resolved rate",
		Long: `Evaluate a task set (a YAML file; see examples/eval/tasks.yaml): for each
task, a fresh workspace of its repo at its base commit gets a patch,
then agentbox's review gate runs its fail_to_pass tests and its
pass_to_pass tests, each in a fresh sandbox; a task is resolved when both
pass. --patch reference applies the task's reference patch (every task
must resolve: this validates the task set), empty applies nothing (none
may resolve), solve runs the agent loop (--model, default the task's
scripted model). --json prints one object with resolved and total.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if !slices.Contains([]string{"reference", "empty", "solve"}, patch) {
				return fmt.Errorf("--patch %q: reference, empty or solve", patch)
			}
			set, dir, err := loadEvalSet(args[0])
			if err != nil {
				return err
			}
			cl, err := c.client()
			if err != nil {
				return err
			}
			// A task's repo may be a git bundle: cloned once here, bare,
			// into a directory the daemon reads, removed after.
			tmp, err := os.MkdirTemp("", "agentbox-eval-")
			if err != nil {
				return err
			}
			defer os.RemoveAll(tmp)
			bundles := map[string]string{}
			for i, t := range set.Tasks {
				repo := t.Repo
				if strings.Contains(repo, "://") || !strings.HasSuffix(repo, ".bundle") {
					continue
				}
				if !filepath.IsAbs(repo) {
					repo = filepath.Join(dir, repo)
				}
				if bundles[repo] == "" {
					dst := filepath.Join(tmp, fmt.Sprintf("repo%d.git", len(bundles)))
					if out, err := exec.CommandContext(cmd.Context(), "git", "clone", "-q", "--bare", repo, dst).CombinedOutput(); err != nil {
						return fmt.Errorf("task %s: cloning the bundle %s: %v: %s", t.ID, repo, err, out)
					}
					bundles[repo] = dst
				}
				set.Tasks[i].Repo = bundles[repo]
			}
			if err := prepareRecipes(cmd.Context(), set.Tasks, tmp); err != nil {
				return err
			}
			results := make([]evalResult, len(set.Tasks))
			sem := make(chan struct{}, max(parallel, 1))
			var wg sync.WaitGroup
			for i, t := range set.Tasks {
				wg.Add(1)
				go func() {
					defer wg.Done()
					sem <- struct{}{}
					defer func() { <-sem }()
					results[i] = c.evalOne(cmd.Context(), cl, dir, t, patch, model, attempts, keep)
				}()
			}
			wg.Wait()
			rep := evalReport{Patch: patch, Total: len(results), Tasks: results, Failures: map[string]int{}}
			var walls []int64
			for _, r := range results {
				if r.Resolved {
					rep.Resolved++
				}
				rep.Tokens += r.Tokens
				rep.CostUSD += r.CostUSD
				for k, v := range r.Failures {
					rep.Failures[k] += v
				}
				walls = append(walls, r.WallMS)
			}
			slices.Sort(walls)
			rep.WallMS.Min, rep.WallMS.Median, rep.WallMS.Max = walls[0], walls[len(walls)/2], walls[len(walls)-1]
			rep.Rate = float64(rep.Resolved) / float64(rep.Total)
			return c.emit(rep, func(w io.Writer) { printEval(w, rep) })
		},
	}
	cmd.Flags().StringVar(&patch, "patch", "reference", "reference, empty or solve")
	cmd.Flags().StringVar(&model, "model", "", "with --patch solve: PROVIDER:MODEL (default: each task's scripted model)")
	cmd.Flags().IntVar(&attempts, "attempts", 1, "with --patch solve: attempts per task")
	cmd.Flags().IntVar(&parallel, "parallel", 2, "tasks evaluated at once")
	cmd.Flags().BoolVar(&keep, "keep", false, "keep the workspaces (default: removed after)")
	return cmd
}

// evalOne evaluates one task; whatever goes wrong is the task's failure,
// not the harness's.
func (c *cli) evalOne(ctx context.Context, cl *client.Client, dir string, t evalTask, patch, model string, attempts int, keep bool) (res evalResult) {
	start := time.Now()
	res = evalResult{ID: t.ID}
	defer func() { res.WallMS = time.Since(start).Milliseconds() }()
	repo := t.Repo
	if !strings.Contains(repo, "://") && !filepath.IsAbs(repo) {
		repo = filepath.Join(dir, repo)
	}
	var removes []string
	if !keep {
		defer func() {
			for _, ws := range removes {
				cl.RemoveWorkspace(context.WithoutCancel(ctx), ws)
			}
		}()
	}
	test, regress, err := t.commands()
	if err != nil {
		res.Failure = err.Error()
		return res
	}
	ws := ""
	switch patch {
	case "reference", "empty":
		w, err := cl.CreateWorkspace(ctx, client.CreateWorkspace{Repo: repo, Ref: t.Base, Task: "eval " + t.ID})
		if err != nil {
			res.Failure = "workspace: " + err.Error()
			return res
		}
		ws = w.ID
		removes = append(removes, ws)
		if patch == "reference" {
			p := t.patchText
			if t.GoModule == nil {
				b, err := os.ReadFile(filepath.Join(dir, t.Patch))
				if err != nil {
					res.Failure = "reference patch: " + err.Error()
					return res
				}
				p = string(b)
			}
			if err := applyPatch(ctx, cl, ws, p); err != nil {
				res.Failure = "applying the reference patch: " + err.Error()
				return res
			}
		}
	case "solve":
		// With hidden tests (a test patch), the loop can only run the
		// tests that are there: pass_to_pass.
		loopTest := test
		if t.testPatchText != "" || t.TestPatch != "" {
			loopTest = regress
		}
		if loopTest == "" {
			res.Failure = "the task's tests are hidden and it has no pass_to_pass: nothing for the loop to run"
			return res
		}
		req := client.SolveRequest{Repo: repo, Ref: t.Base, Task: t.Problem, Test: loopTest, Attempts: attempts, Model: model, Timeout: t.TestTimeout}
		if model == "" {
			b, err := os.ReadFile(filepath.Join(dir, t.Script))
			if t.Script == "" || err != nil {
				res.Failure = fmt.Sprintf("task %s has no scripted model and --model is not given", t.ID)
				return res
			}
			req.Model, req.Script = "scripted", string(b)
		}
		run, err := cl.Solve(ctx, req)
		if err != nil {
			res.Failure = "solve: " + err.Error()
			return res
		}
		for run.State == apitypes.SolveRunning {
			select {
			case <-ctx.Done():
				res.Failure = ctx.Err().Error()
				return res
			case <-time.After(300 * time.Millisecond):
			}
			if run, err = cl.GetSolve(ctx, run.ID); err != nil {
				res.Failure = "solve: " + err.Error()
				return res
			}
		}
		res.SolveRun, res.Attempts = run.ID, len(run.Attempts)
		if run.Workspace != "" {
			removes = append(removes, run.Workspace)
		}
		res.Failures = map[string]int{}
		for _, a := range run.Attempts {
			removes = append(removes, a.Workspace)
			res.Tokens += a.Usage.InputTokens + a.Usage.OutputTokens
			res.CostUSD += a.Usage.CostUSD
			for k, v := range a.Failures {
				res.Failures[k] += v
			}
			if a.Rank == 1 {
				ws, res.Stop = a.Workspace, a.Stop
			}
		}
		// The best-ranked attempt is the one evaluated.
		if ws == "" {
			res.Failure = "solve run " + run.ID + " is " + run.State + ": " + run.Error
			return res
		}
	}
	res.Workspace = ws
	tp := t.testPatchText
	if t.TestPatch != "" {
		b, err := os.ReadFile(filepath.Join(dir, t.TestPatch))
		if err != nil {
			res.Failure = "test patch: " + err.Error()
			return res
		}
		tp = string(b)
	}
	if tp != "" {
		if err := applyPatch(ctx, cl, ws, tp); err != nil {
			res.Failure = "applying the test patch: " + err.Error()
			return res
		}
	}
	// The verdict is the review gate's: fail_to_pass as its test and
	// pass_to_pass as its regression, each in a fresh sandbox.
	cand, err := cl.Review(ctx, ws, client.ReviewRequest{Test: test, Regress: regress, Timeout: t.TestTimeout, Message: "eval " + t.ID})
	if err != nil {
		res.Failure = "review: " + err.Error()
		return res
	}
	res.Candidate, res.Evidence = cand.ID, &cand.Evidence
	res.FailToPass = cand.Evidence.Tests != nil && cand.Evidence.Tests.Passed
	res.PassToPass = cand.Evidence.Regress == nil || cand.Evidence.Regress.Passed
	res.Resolved = res.FailToPass && res.PassToPass
	switch {
	case !res.FailToPass:
		res.Failure = "fail_to_pass tests still fail"
	case !res.PassToPass:
		res.Failure = "pass_to_pass tests broke"
	}
	return res
}

// applyPatch applies a git diff to workspace ws, in its sandbox.
func applyPatch(ctx context.Context, cl *client.Client, ws, patch string) error {
	out, err := cl.ExecBuffered(ctx, ws, client.Exec{Argv: []string{"git", "apply", "--whitespace=nowarn", "-"}}, strings.NewReader(patch))
	if err != nil {
		return err
	}
	if out.ExitCode != 0 {
		return fmt.Errorf("git apply exited %d: %s", out.ExitCode, out.Stderr)
	}
	return nil
}

// prepareRecipes builds the repositories of the go_module tasks in tmp
// (once per module and pair of versions) from the module proxy's zips,
// cached, and points each task at its repository and patches.
func prepareRecipes(ctx context.Context, tasks []evalTask, tmp string) error {
	var f *evalset.Fetcher
	built := map[evalset.GoModule]evalset.Repo{}
	for i, t := range tasks {
		if t.GoModule == nil {
			continue
		}
		if f == nil {
			proxy, err := evalset.ProxyFromEnv()
			if err != nil {
				return err
			}
			cache, err := evalset.DefaultCache()
			if err != nil {
				return err
			}
			f = &evalset.Fetcher{Proxy: proxy, Cache: cache}
		}
		r, ok := built[*t.GoModule]
		if !ok {
			var err error
			if r, err = f.Build(ctx, *t.GoModule, filepath.Join(tmp, fmt.Sprintf("gomod%d", len(built)))); err != nil {
				return fmt.Errorf("task %s: %w", t.ID, err)
			}
			built[*t.GoModule] = r
		}
		tasks[i].Repo, tasks[i].Base, tasks[i].patchText, tasks[i].testPatchText = r.Dir, r.Ref, r.Patch, r.TestPatch
	}
	return nil
}

func printEval(w io.Writer, rep evalReport) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "TASK\tRESOLVED\tFAIL_TO_PASS\tPASS_TO_PASS\tTIME\tATTEMPTS\tTOKENS\tCOST\tFAILURE")
	yes := map[bool]string{true: "yes", false: "no"}
	for _, r := range rep.Tasks {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d\t%d\t$%.4f\t%s\n", r.ID, yes[r.Resolved], yes[r.FailToPass], yes[r.PassToPass],
			time.Duration(r.WallMS)*time.Millisecond, r.Attempts, r.Tokens, r.CostUSD, r.Failure)
	}
	tw.Flush()
	fmt.Fprintf(w, "patch %s: resolved %d of %d (%.0f%%); time min %s median %s max %s; %d tokens, $%.4f\n", rep.Patch, rep.Resolved, rep.Total, 100*rep.Rate,
		time.Duration(rep.WallMS.Min)*time.Millisecond, time.Duration(rep.WallMS.Median)*time.Millisecond, time.Duration(rep.WallMS.Max)*time.Millisecond, rep.Tokens, rep.CostUSD)
	if len(rep.Failures) > 0 {
		fmt.Fprintf(w, "failure categories: %v\n", rep.Failures)
	}
}
