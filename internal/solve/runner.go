package solve

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/agentbox/agentbox/internal/apitypes"
	"github.com/agentbox/agentbox/internal/errdefs"
	"github.com/agentbox/agentbox/internal/ids"
	"github.com/agentbox/agentbox/internal/manager"
	"github.com/agentbox/agentbox/internal/store"
)

// ProviderFunc opens a model provider by name ("openai", "anthropic") for
// a model. The daemon injects it, so that this package holds no HTTP
// client; its keys come from the daemon's secret store.
type ProviderFunc func(ctx context.Context, provider, model string) (Provider, error)

// Options configure a Runner.
type Options struct {
	// Providers opens the providers that are not scripted; nil: only
	// the scripted model is available.
	Providers ProviderFunc
	// Observe is told each new failure's category (metrics).
	Observe func(category string)
	Logger  *slog.Logger
}

// Defaults of a run's budget, per attempt.
var DefaultBudget = Budget{Tokens: 500_000, Steps: 40, Wall: 30 * time.Minute}

// defaultTestTimeout bounds each test run.
const defaultTestTimeout = 10 * time.Minute

// Runner runs the loop in the daemon: each run on its own goroutine, its
// every step recorded, so that a run outlives the client that started it
// and resumes after a restart.
type Runner struct {
	m    *manager.Manager
	opts Options
	log  *slog.Logger

	base context.Context
	stop context.CancelCauseFunc
	wg   sync.WaitGroup

	mu      sync.Mutex
	running map[string]context.CancelCauseFunc
}

// errCanceled is the cause of a run's context when it is canceled.
var errCanceled = errors.New("the run was canceled")

// NewRunner returns a Runner over m. Call Resume once the daemon is up and
// Close when it stops.
func NewRunner(m *manager.Manager, opts Options) *Runner {
	base, stop := context.WithCancelCause(context.Background())
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Runner{m: m, opts: opts, log: log, base: base, stop: stop, running: map[string]context.CancelCauseFunc{}}
}

// Resume picks up every run that was running when the daemon stopped, from
// its last completed step.
func (r *Runner) Resume(ctx context.Context) error {
	runs, err := r.m.ListSolveRuns(ctx, apitypes.SolveRunning)
	if err != nil {
		return fmt.Errorf("resuming solve runs: %w", err)
	}
	for _, run := range runs {
		// Another node's run is that node's to resume (a run from before
		// nodes, with none, is resumed by whichever node starts).
		if run.Node != "" && run.Node != r.m.NodeID() {
			continue
		}
		r.log.InfoContext(ctx, "resuming a solve run", "run_id", run.ID)
		r.launch(run)
	}
	return nil
}

// Close stops every loop without ending its run (they resume at the next
// start) and waits for them.
func (r *Runner) Close() {
	r.stop(ErrShutdown)
	r.wg.Wait()
}

func (r *Runner) launch(run store.SolveRun) {
	ctx, cancel := context.WithCancelCause(r.base)
	r.mu.Lock()
	r.running[run.ID] = cancel
	r.mu.Unlock()
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		defer func() {
			r.mu.Lock()
			delete(r.running, run.ID)
			r.mu.Unlock()
			cancel(nil)
		}()
		r.drive(ctx, run)
	}()
}

// checkRequest validates a request and fills its defaults.
func checkRequest(req *apitypes.SolveRequest) error {
	switch {
	case strings.TrimSpace(req.Repo) == "":
		return errdefs.Invalid("solve: no repo")
	case strings.TrimSpace(req.Task) == "":
		return errdefs.Invalid("solve: no task")
	case strings.TrimSpace(req.Test) == "":
		return errdefs.Invalid("solve: no test command: nothing would show the fix works")
	case req.Attempts < 0 || req.Attempts > apitypes.MaxForks:
		return errdefs.Invalid("solve: attempts %d is not between 1 and %d", req.Attempts, apitypes.MaxForks)
	case len(req.Task) > 64<<10:
		return errdefs.Invalid("solve: the task is longer than 64 KiB")
	}
	if req.Attempts == 0 {
		req.Attempts = 1
	}
	if req.Model == "" {
		req.Model = "scripted"
	}
	specs := []string{req.Model}
	for role, m := range req.Models {
		if !slices.Contains(ModelRoles, Role(role)) {
			return errdefs.Invalid("solve: models: %q is not a model role (planner, coder, debugger)", role)
		}
		specs = append(specs, m)
	}
	for _, s := range specs {
		p, _, err := ParseModel(s)
		if err != nil {
			return errdefs.Invalid("solve: %v", err)
		}
		if p == "scripted" && req.Script == "" {
			return errdefs.Invalid("solve: the scripted model needs its script (--model scripted:FILE)")
		}
	}
	if req.Script != "" {
		if _, err := ParseScript([]byte(req.Script)); err != nil {
			return errdefs.Invalid("solve: %v", err)
		}
	}
	if _, err := budget(req.Budget); err != nil {
		return err
	}
	if req.Timeout != "" {
		if d, err := time.ParseDuration(req.Timeout); err != nil || d <= 0 {
			return errdefs.Invalid("solve: timeout %q is not a positive duration", req.Timeout)
		}
	}
	return nil
}

func budget(b apitypes.SolveBudget) (Budget, error) {
	out := DefaultBudget
	if b.Tokens < 0 || b.Steps < 0 || b.CostUSD < 0 {
		return out, errdefs.Invalid("solve: a budget is negative")
	}
	if b.Tokens > 0 {
		out.Tokens = b.Tokens
	}
	if b.Steps > 0 {
		out.Steps = b.Steps
	}
	if b.CostUSD > 0 {
		out.CostUSD = b.CostUSD
	}
	if b.Wall != "" {
		d, err := time.ParseDuration(b.Wall)
		if err != nil || d <= 0 {
			return out, errdefs.Invalid("solve: wall budget %q is not a positive duration", b.Wall)
		}
		out.Wall = d
	}
	return out, nil
}

// Start records a run and starts it; the reply comes before the loop
// does anything.
func (r *Runner) Start(ctx context.Context, req apitypes.SolveRequest) (apitypes.SolveRun, error) {
	if err := checkRequest(&req); err != nil {
		return apitypes.SolveRun{}, err
	}
	now := time.Now().UTC()
	run := store.SolveRun{ID: ids.New("solve"), State: apitypes.SolveRunning, Request: req, Attempts: []apitypes.SolveAttempt{}, Node: r.m.NodeID(), CreatedAt: now, UpdatedAt: now}
	if err := r.m.CreateSolveRun(ctx, run); err != nil {
		return apitypes.SolveRun{}, err
	}
	r.m.Event(ctx, store.Event{Type: "solve.started"}, map[string]any{"run": run.ID, "repo": req.Repo, "attempts": req.Attempts, "model": req.Model})
	r.launch(run)
	return run, nil
}

// Get returns a run.
func (r *Runner) Get(ctx context.Context, id string) (apitypes.SolveRun, error) {
	return r.m.GetSolveRun(ctx, id)
}

// List returns every run, newest first.
func (r *Runner) List(ctx context.Context) ([]apitypes.SolveRun, error) {
	return r.m.ListSolveRuns(ctx, "")
}

// Steps returns a run's steps.
func (r *Runner) Steps(ctx context.Context, id string) ([]apitypes.SolveStep, error) {
	if _, err := r.m.GetSolveRun(ctx, id); err != nil {
		return nil, err
	}
	return r.m.ListSolveSteps(ctx, id, -1)
}

// Cancel ends a running run: its loops stop at once, no candidate is
// made. The workspaces stay for inspection.
func (r *Runner) Cancel(ctx context.Context, id string) (apitypes.SolveRun, error) {
	run, err := r.m.GetSolveRun(ctx, id)
	if err != nil {
		return run, err
	}
	if run.State != apitypes.SolveRunning {
		return run, fmt.Errorf("solve run %s is %s, not running: %w", id, run.State, errdefs.ErrConflict)
	}
	run.State, run.UpdatedAt = apitypes.SolveCanceled, time.Now().UTC()
	if err := r.m.UpdateSolveRun(ctx, run, apitypes.SolveRunning); err != nil {
		return run, err
	}
	r.mu.Lock()
	cancel := r.running[id]
	r.mu.Unlock()
	if cancel != nil {
		cancel(errCanceled)
	}
	r.m.Event(ctx, store.Event{Type: "solve.canceled"}, map[string]any{"run": id})
	return run, nil
}

// phase names of attempt 0's steps (the run's own).
const (
	phaseWorkspace = "workspace"
	phaseForks     = "forks"
	phaseReview    = "review"
	phaseDone      = "done"
)

type phaseDoc struct {
	Workspace   string   `json:"workspace,omitempty"`
	Forks       []string `json:"forks,omitempty"`
	Candidate   string   `json:"candidate,omitempty"`
	Disposition string   `json:"disposition,omitempty"`
	Findings    []string `json:"findings,omitempty"`
	Error       string   `json:"error,omitempty"`
}

// drive runs a run from wherever its steps say it is.
func (r *Runner) drive(ctx context.Context, run store.SolveRun) {
	err := r.run(ctx, &run)
	if errors.Is(context.Cause(ctx), ErrShutdown) {
		return
	}
	if errors.Is(context.Cause(ctx), errCanceled) {
		return // Cancel recorded the state.
	}
	wctx := context.WithoutCancel(ctx)
	run.UpdatedAt = time.Now().UTC()
	if err != nil {
		run.State, run.Error = apitypes.SolveFailed, err.Error()
		r.log.WarnContext(ctx, "solve run failed", "run_id", run.ID, "err", err)
	} else {
		run.State = apitypes.SolveDone
	}
	if uerr := r.m.UpdateSolveRun(wctx, run, apitypes.SolveRunning); uerr != nil {
		r.log.WarnContext(ctx, "recording a solve run's end", "run_id", run.ID, "err", uerr)
	}
	r.m.Event(wctx, store.Event{Type: "solve." + run.State, WorkspaceID: run.Workspace},
		map[string]any{"run": run.ID, "best": run.Best, "error": run.Error})
}

// save records the run's document as it is now.
func (r *Runner) save(ctx context.Context, mu *sync.Mutex, run *store.SolveRun) error {
	mu.Lock()
	defer mu.Unlock()
	run.UpdatedAt = time.Now().UTC()
	return r.m.UpdateSolveRun(ctx, *run, apitypes.SolveRunning)
}

func (r *Runner) run(ctx context.Context, run *store.SolveRun) error {
	req := run.Request
	phases, err := r.m.ListSolveSteps(ctx, run.ID, 0)
	if err != nil {
		return err
	}
	// A phase record that does not decode ends the run: going on from an
	// empty one would fork nothing, or fork an empty workspace ID.
	var bad error
	find := func(kind string) (phaseDoc, bool) {
		for _, s := range phases {
			if s.Kind == kind {
				var d phaseDoc
				if err := json.Unmarshal(s.Doc, &d); err != nil && bad == nil {
					bad = fmt.Errorf("solve run %s: its %s record does not decode: %w", run.ID, kind, err)
				}
				return d, true
			}
		}
		return phaseDoc{}, false
	}
	record := func(kind string, d phaseDoc) error {
		b, _ := json.Marshal(d)
		s := store.SolveStep{RunID: run.ID, Attempt: 0, Seq: len(phases), Role: "run", Kind: kind, Doc: b, CreatedAt: time.Now().UTC()}
		if err := r.m.AppendSolveStep(context.WithoutCancel(ctx), s); err != nil {
			return err
		}
		phases = append(phases, s)
		return nil
	}
	var mu sync.Mutex

	// The workspace, then one fork per attempt.
	// The run's workspaces are on branches named after it, so that one
	// made just before a crash, and not recorded yet, is found again
	// rather than left behind.
	wsBranch, forkBranch := "agentbox/"+run.ID, "agentbox/"+run.ID+"-attempt"
	mine, err := r.m.ListWorkspaces(ctx, manager.ListFilter{})
	if err != nil {
		return err
	}
	wsDoc, ok := find(phaseWorkspace)
	if bad != nil {
		return bad
	}
	if !ok {
		for _, w := range mine {
			if w.Branch == wsBranch {
				wsDoc = phaseDoc{Workspace: w.ID}
			}
		}
		if wsDoc.Workspace == "" {
			w, err := r.m.CreateWorkspace(ctx, manager.CreateRequest{Repo: req.Repo, Ref: req.Ref, Task: taskLabel(req.Task), Branch: wsBranch})
			if err != nil {
				return fmt.Errorf("solve run %s: making the workspace: %w", run.ID, err)
			}
			wsDoc = phaseDoc{Workspace: w.ID}
		}
		if err := record(phaseWorkspace, wsDoc); err != nil {
			return err
		}
	}
	run.Workspace = wsDoc.Workspace
	forks, ok := find(phaseForks)
	if bad != nil {
		return bad
	}
	if !ok {
		// Forks made before a crash and not recorded go: the attempts
		// start together from the workspace as it is.
		for _, w := range mine {
			if w.Branch == forkBranch || strings.HasPrefix(w.Branch, forkBranch+"-") {
				if err := r.m.RemoveWorkspace(ctx, w.ID); err != nil {
					return fmt.Errorf("solve run %s: removing an unrecorded fork: %w", run.ID, err)
				}
			}
		}
		ws, err := r.m.ForkWorkspaces(ctx, wsDoc.Workspace, apitypes.ForksRequest{Count: req.Attempts, ForkRequest: apitypes.ForkRequest{Task: taskLabel(req.Task), Branch: forkBranch}})
		if err != nil {
			return fmt.Errorf("solve run %s: forking the attempts: %w", run.ID, err)
		}
		for _, w := range ws {
			forks.Forks = append(forks.Forks, w.ID)
		}
		if err := record(phaseForks, forks); err != nil {
			return err
		}
	}
	if len(run.Attempts) != len(forks.Forks) {
		run.Attempts = make([]apitypes.SolveAttempt, len(forks.Forks))
		for i, f := range forks.Forks {
			run.Attempts[i] = apitypes.SolveAttempt{N: i + 1, Workspace: f}
		}
	}
	if err := r.save(ctx, &mu, run); err != nil {
		return err
	}

	cfg, err := r.config(ctx, run)
	if err != nil {
		return err
	}
	var wg sync.WaitGroup
	errs := make([]error, len(run.Attempts))
	for i := range run.Attempts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = r.attempt(ctx, run, i, cfg, &mu)
		}()
	}
	wg.Wait()
	if err := ctx.Err(); err != nil {
		return context.Cause(ctx)
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	rank(run.Attempts)
	for _, a := range run.Attempts {
		if a.Rank == 1 {
			run.Best = a.Candidate
		}
	}
	if _, ok := find(phaseDone); !ok {
		if err := record(phaseDone, phaseDoc{Candidate: run.Best}); err != nil {
			return err
		}
	}
	return nil
}

// taskLabel is the task as a workspace's one-line label.
func taskLabel(task string) string {
	line, _, _ := strings.Cut(strings.TrimSpace(task), "\n")
	var b strings.Builder
	for _, c := range line {
		if c < 0x20 || c == 0x7f {
			c = ' '
		}
		if b.Len()+len(string(c)) > 200 {
			break
		}
		b.WriteRune(c)
	}
	return b.String()
}

// config is the loop's configuration shared by a run's attempts.
func (r *Runner) config(ctx context.Context, run *store.SolveRun) (Config, error) {
	req := run.Request
	b, err := budget(req.Budget)
	if err != nil {
		return Config{}, err
	}
	cfg := Config{Task: req.Task, Test: req.Test, TestTimeout: defaultTestTimeout, Budget: b, Started: run.CreatedAt,
		Providers: map[Role]Provider{}, Models: map[Role]string{}, Observe: r.opts.Observe}
	if req.Timeout != "" {
		cfg.TestTimeout, _ = time.ParseDuration(req.Timeout)
	}
	secrets, err := r.m.SecretValues(ctx)
	if err != nil {
		return Config{}, err
	}
	cfg.Redactor = Redactor{Secrets: secrets, Paths: []string{r.m.DataDir()}}
	var scripted *Scripted
	for _, role := range ModelRoles {
		spec := req.Model
		if s, ok := req.Models[string(role)]; ok {
			spec = s
		}
		prov, model, err := ParseModel(spec)
		if err != nil {
			return Config{}, err
		}
		cfg.Models[role] = model
		if prov == "scripted" {
			if scripted == nil {
				s, err := ParseScript([]byte(req.Script))
				if err != nil {
					return Config{}, err
				}
				scripted = NewScripted(s)
			}
			cfg.Providers[role] = scripted
			continue
		}
		if r.opts.Providers == nil {
			return Config{}, fmt.Errorf("model %q: this daemon has no %s provider", spec, prov)
		}
		p, err := r.opts.Providers(ctx, prov, model)
		if err != nil {
			return Config{}, fmt.Errorf("model %q: %w", spec, err)
		}
		cfg.Providers[role] = p
	}
	return cfg, nil
}

// attempt runs attempt i's loop (or replays it), then its review.
func (r *Runner) attempt(ctx context.Context, run *store.SolveRun, i int, cfg Config, mu *sync.Mutex) error {
	n := i + 1
	mu.Lock()
	ws := run.Attempts[i].Workspace
	mu.Unlock()
	j := &journal{m: r.m, run: run.ID, attempt: n}
	if _, err := j.Load(ctx); err != nil {
		return err
	}
	var review *phaseDoc
	if k := len(j.steps); k > 0 && j.steps[k-1].Kind == phaseReview {
		var d phaseDoc
		if err := json.Unmarshal(j.steps[k-1].Doc, &d); err != nil {
			return fmt.Errorf("solve run %s, attempt %d: its review record does not decode: %w", run.ID, n, err)
		}
		review = &d
	}
	stop, err := Run(ctx, cfg, WorkspaceEnv{M: r.m, WS: ws}, j)
	if err != nil {
		return err
	}
	mu.Lock()
	a := &run.Attempts[i]
	a.Stop, a.Iterations, a.Failures = stopText(stop), stop.Iterations, stop.Failures
	a.Usage = apitypes.SolveUsage{InputTokens: stop.Usage.InputTokens, OutputTokens: stop.Usage.OutputTokens, CostUSD: stop.Usage.CostUSD,
		Steps: j.loopSteps(), WallMS: time.Since(run.CreatedAt).Milliseconds()}
	mu.Unlock()
	if stop.Reason == StopCanceled || ctx.Err() != nil {
		return nil
	}
	if review == nil {
		// The review gate judges the attempt's files, whatever the loop
		// said: its tests run again in a fresh sandbox.
		c, err := r.m.Review(ctx, ws, apitypes.ReviewRequest{Test: cfg.Test, Timeout: cfg.TestTimeout.String(), Message: taskLabel(cfg.Task)})
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("attempt %d: review of %s: %w", n, ws, err)
		}
		review = &phaseDoc{Candidate: c.ID, Disposition: c.Disposition, Findings: c.Findings}
		b, _ := json.Marshal(review)
		if err := r.m.AppendSolveStep(context.WithoutCancel(ctx), store.SolveStep{RunID: run.ID, Attempt: n, Seq: len(j.steps), Role: "review", Kind: phaseReview, Doc: b, CreatedAt: time.Now().UTC()}); err != nil {
			return err
		}
	}
	mu.Lock()
	a.Candidate, a.Disposition = review.Candidate, review.Disposition
	mu.Unlock()
	return r.save(context.WithoutCancel(ctx), mu, run)
}

func stopText(s Stop) string {
	if s.Detail != "" {
		return s.Reason + " (" + s.Detail + ")"
	}
	return s.Reason
}

// rank orders attempts by evidence: ready before blocked, then a loop
// that passed, then fewer iterations, then fewer tokens. Rank 1 is best.
func rank(as []apitypes.SolveAttempt) {
	order := make([]int, len(as))
	for i := range order {
		order[i] = i
	}
	score := func(a apitypes.SolveAttempt) int {
		switch a.Disposition {
		case apitypes.DispositionReady, apitypes.DispositionApproved:
			return 0
		case apitypes.DispositionBlocked:
			return 1
		}
		return 2
	}
	slices.SortStableFunc(order, func(x, y int) int {
		a, b := as[x], as[y]
		return cmp.Or(cmp.Compare(score(a), score(b)),
			cmp.Compare(boolInt(!strings.HasPrefix(a.Stop, StopPassed)), boolInt(!strings.HasPrefix(b.Stop, StopPassed))),
			cmp.Compare(a.Iterations, b.Iterations),
			cmp.Compare(a.Usage.InputTokens+a.Usage.OutputTokens, b.Usage.InputTokens+b.Usage.OutputTokens))
	})
	for r, i := range order {
		as[i].Rank = r + 1
	}
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// journal is an attempt's steps in the store: attempt n of the run.
type journal struct {
	m       *manager.Manager
	run     string
	attempt int
	steps   []store.SolveStep
}

func (j *journal) Load(ctx context.Context) ([]Record, error) {
	steps, err := j.m.ListSolveSteps(ctx, j.run, j.attempt)
	if err != nil {
		return nil, err
	}
	j.steps = steps
	var out []Record
	for _, s := range steps {
		if s.Kind == phaseReview {
			break
		}
		var rec Record
		if err := json.Unmarshal(s.Doc, &rec); err != nil {
			return nil, fmt.Errorf("solve run %s attempt %d step %d: %w", j.run, j.attempt, s.Seq, err)
		}
		out = append(out, rec)
	}
	return out, nil
}

func (j *journal) Append(ctx context.Context, rec Record) error {
	b, err := json.Marshal(rec)
	if err != nil {
		return err
	}
	s := store.SolveStep{RunID: j.run, Attempt: j.attempt, Seq: len(j.steps), Role: string(rec.Role), Kind: rec.Kind, Doc: b, CreatedAt: time.Now().UTC()}
	if err := j.m.AppendSolveStep(ctx, s); err != nil {
		return err
	}
	j.steps = append(j.steps, s)
	return nil
}

// loopSteps counts the role steps recorded (plan, patch, execution,
// diagnosis).
func (j *journal) loopSteps() int {
	n := 0
	for _, s := range j.steps {
		switch s.Kind {
		case KindPlan, KindPatch, KindExecution, KindDiagnosis:
			n++
		}
	}
	return n
}
