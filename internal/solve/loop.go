package solve

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"
)

// Budget bounds one attempt's loop; a zero field is no bound.
type Budget struct {
	Tokens  int
	Steps   int
	Wall    time.Duration
	CostUSD float64
}

// Repeats is how many times the same failure signature or the same edit
// may come before the circuit breaker halts the loop.
const Repeats = 3

// Config is one attempt's loop.
type Config struct {
	Task string
	// Test is the command the executor runs (sh -c); TestTimeout bounds it.
	Test        string
	TestTimeout time.Duration
	// Providers and Models give each model role its provider and model.
	Providers map[Role]Provider
	Models    map[Role]string
	Budget    Budget
	Redactor  Redactor
	// Started is when the run began: the wall-clock budget counts from it,
	// across restarts.
	Started time.Time
	// Now is the clock (time.Now if nil).
	Now func() time.Time
	// Observe, if set, is told the category of each new failure.
	Observe func(category string)
	// CoderTurns bounds the model calls of one coder step when the Env
	// lets the coder read (a Browser); DefaultCoderTurns if 0. Each
	// call counts against the step and token budgets.
	CoderTurns int
}

// Record is one durable step of a loop.
type Record struct {
	Role    Role            `json:"role"`
	Kind    string          `json:"kind"`
	Message json.RawMessage `json:"message"`
	Usage   Usage           `json:"usage"`
}

// Step kinds.
const (
	KindPlan      = "plan"
	KindPatch     = "patch"
	KindApplied   = "applied"
	KindExecution = "execution"
	KindDiagnosis = "diagnosis"
	KindStop      = "stop"
)

// Journal keeps a loop's steps. A loop given a journal with steps in it
// replays them instead of calling models or running tests again, and goes
// on from the last one: that is how a run survives a daemon restart.
type Journal interface {
	Load(ctx context.Context) ([]Record, error)
	Append(ctx context.Context, r Record) error
}

// MemJournal is a Journal in memory.
type MemJournal struct{ Records []Record }

func (j *MemJournal) Load(context.Context) ([]Record, error) {
	return append([]Record(nil), j.Records...), nil
}
func (j *MemJournal) Append(_ context.Context, r Record) error {
	j.Records = append(j.Records, r)
	return nil
}

type loop struct {
	cfg   Config
	env   Env
	j     Journal
	recs  []Record
	pos   int
	usage Usage
	steps int
	turns map[Role]int
	// coderCalls counts the coder's model calls: its requests' turns.
	coderCalls int
	fails      map[string]int
	sigs       map[string]int
	edits      map[string]int
}

// Run runs the loop of one attempt to its stop, which it records last.
// An error is returned only when the journal cannot be read or written;
// everything else, a model's or a sandbox's failure included, is a stop
// with its reason.
func Run(ctx context.Context, cfg Config, env Env, j Journal) (Stop, error) {
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Started.IsZero() {
		cfg.Started = cfg.Now()
	}
	recs, err := j.Load(ctx)
	if err != nil {
		return Stop{}, fmt.Errorf("loading the loop's steps: %w", err)
	}
	l := &loop{cfg: cfg, env: env, j: j, recs: recs, turns: map[Role]int{}, fails: map[string]int{}, sigs: map[string]int{}, edits: map[string]int{}}
	if n := len(recs); n > 0 && recs[n-1].Kind == KindStop {
		var s Stop
		err := json.Unmarshal(recs[n-1].Message, &s)
		return s, err
	}
	if cfg.Budget.Wall > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, cfg.Started.Add(cfg.Budget.Wall))
		defer cancel()
	}
	reason, detail := l.run(ctx)
	if errors.Is(context.Cause(ctx), ErrShutdown) {
		// Not a stop: the daemon is going away, and the run goes on
		// from its last recorded step when it is back.
		return Stop{}, ErrShutdown
	}
	s := Stop{Reason: reason, Detail: detail, Usage: l.usage, Iterations: l.turns[Coder], Failures: l.fails}
	if len(s.Failures) == 0 {
		s.Failures = nil
	}
	if err := l.record(context.WithoutCancel(ctx), Executor, KindStop, s, Usage{}); err != nil {
		return s, err
	}
	return s, nil
}

// ErrShutdown is the cause a daemon cancels its loops with when it stops:
// a loop ended so records no stop, and resumes later.
var ErrShutdown = errors.New("the daemon is shutting down")

// run is the loop; it returns the stop reason and a detail.
func (l *loop) run(ctx context.Context) (string, string) {
	var plan Plan
	if reason, detail, ok := l.step(ctx, Planner, KindPlan, &plan, func() (any, Usage, error) {
		files, err := l.env.Files(ctx)
		if err != nil {
			return nil, Usage{}, err
		}
		return PlanTask(ctx, l.cfg.Providers[Planner], l.cfg.Models[Planner], l.cfg.Task, files, 0)
	}); !ok {
		return reason, detail
	}
	var last *ExecutionResult
	var diag *Diagnosis
	for {
		var patch Patch
		turn := l.turns[Coder]
		if reason, detail, ok := l.step(ctx, Coder, KindPatch, &patch, func() (any, Usage, error) {
			in := CodeInput{Task: l.cfg.Task, Plan: plan, Files: map[string]string{}, Last: last, Diagnosis: diag,
				MaxTurns: l.cfg.CoderTurns, Redactor: l.cfg.Redactor, Over: l.over}
			if b, ok := l.env.(Browser); ok {
				in.Browse = b
			}
			total := 0
			for _, f := range plan.Files {
				if checkPath(f) != nil || total > maxFilesText {
					continue
				}
				if text, err := l.env.ReadFile(ctx, f, maxFileBytes); err == nil {
					text, _ = l.cfg.Redactor.Redact(text)
					in.Files[f] = text
					total += len(text)
				}
			}
			return WritePatch(ctx, l.cfg.Providers[Coder], l.cfg.Models[Coder], in, l.coderCalls)
		}); !ok {
			return reason, detail
		}
		l.turns[Coder] = turn + 1
		// A coder step that read first made several model calls: each
		// is a step of the budget, and the next step's turns follow.
		calls := max(patch.Turns, 1)
		l.coderCalls += calls
		l.steps += calls - 1
		sig := patch.Signature()
		if l.edits[sig]++; l.edits[sig] >= Repeats {
			return "circuit breaker: the same edit " + fmt.Sprint(Repeats) + " times", "edit " + sig
		}

		// The edits, then the tests; an edit that does not apply is a
		// failure the debugger reads like any other.
		var res ExecutionResult
		applyErr := ""
		replayed, err := l.replay(KindApplied, &applyErr)
		if err != nil {
			return "error: " + err.Error(), ""
		}
		if !replayed {
			resumed := l.pos > 0 && l.pos == len(l.recs)
			if err := ApplyPatch(ctx, l.env, patch, resumed); err != nil {
				if ctx.Err() != nil {
					return l.ctxReason(ctx)
				}
				// Redacted before it is recorded: it may carry the
				// sandbox's output (a failed install), and records are
				// what `solve logs` shows.
				applyErr, _ = l.cfg.Redactor.Redact(err.Error())
				applyErr, _ = Bound(applyErr, MaxFeedback)
			}
			if err := l.record(ctx, Coder, KindApplied, applyErr, Usage{}); err != nil {
				return "error: " + err.Error(), ""
			}
		}
		if reason, detail, ok := l.step(ctx, Executor, KindExecution, &res, func() (any, Usage, error) {
			if applyErr != "" {
				return ExecutionResult{Command: "apply the patch", ExitCode: 1, Output: applyErr, Category: CatOther, Signature: Signature(CatOther, applyErr)}, Usage{}, nil
			}
			return noUsage(Execute(ctx, l.env, l.cfg.Test, l.cfg.TestTimeout, l.cfg.Redactor))
		}); !ok {
			return reason, detail
		}
		if res.Passed {
			return StopPassed, res.Summary.Line
		}
		l.fails[res.Category]++
		if l.sigs[res.Signature]++; l.sigs[res.Signature] >= Repeats {
			return "circuit breaker: the same failure " + fmt.Sprint(Repeats) + " times", res.Signature
		}
		last = &res
		var d Diagnosis
		dturn := l.turns[Debugger]
		if reason, detail, ok := l.step(ctx, Debugger, KindDiagnosis, &d, func() (any, Usage, error) {
			return Diagnose(ctx, l.cfg.Providers[Debugger], l.cfg.Models[Debugger], DiagnoseInput{Task: l.cfg.Task, Plan: plan, Patch: patch, Result: res}, dturn)
		}); !ok {
			return reason, detail
		}
		l.turns[Debugger] = dturn + 1
		diag = &d
	}
}

func noUsage(r ExecutionResult, err error) (any, Usage, error) { return r, Usage{}, err }

// step replays the next recorded step of kind into v, or, with none
// left, checks the budgets, runs do and records its message. ok false
// ends the loop with reason and detail.
func (l *loop) step(ctx context.Context, role Role, kind string, v any, do func() (any, Usage, error)) (reason, detail string, ok bool) {
	replayed, err := l.replay(kind, v)
	if err != nil {
		return "error: " + err.Error(), "", false
	}
	if replayed {
		l.steps++
		return "", "", true
	}
	if r := l.limit(); r != "" {
		return r, "", false
	}
	if ctx.Err() != nil {
		r, d := l.ctxReason(ctx)
		return r, d, false
	}
	if role != Executor && l.cfg.Providers[role] == nil {
		return "error: no model for the " + string(role), "", false
	}
	msg, u, err := do()
	l.usage = l.usage.Add(u)
	l.steps++
	if err != nil {
		if ctx.Err() != nil {
			r, d := l.ctxReason(ctx)
			return r, d, false
		}
		if le := (*LimitError)(nil); errors.As(err, &le) {
			return le.Reason, "", false
		}
		return "error: " + err.Error(), "", false
	}
	if kind == KindExecution && l.cfg.Observe != nil {
		if r := msg.(ExecutionResult); !r.Passed {
			l.cfg.Observe(r.Category)
		}
	}
	if err := l.record(ctx, role, kind, msg, u); err != nil {
		return "error: " + err.Error(), "", false
	}
	b, _ := json.Marshal(msg)
	if err := json.Unmarshal(b, v); err != nil {
		return "error: " + err.Error(), "", false
	}
	// A step that went over a budget ends the loop at once.
	if r := l.limit(); r != "" && kind != KindExecution {
		return r, "", false
	}
	return "", "", true
}

// replay decodes the next recorded step into v if there is one; it must
// be of kind.
func (l *loop) replay(kind string, v any) (bool, error) {
	if l.pos >= len(l.recs) {
		return false, nil
	}
	r := l.recs[l.pos]
	if r.Kind != kind {
		return false, fmt.Errorf("resuming: recorded step %d is a %s where the loop expects a %s", l.pos+1, r.Kind, kind)
	}
	if err := json.Unmarshal(r.Message, v); err != nil {
		return false, fmt.Errorf("resuming: recorded step %d: %w", l.pos+1, err)
	}
	l.usage = l.usage.Add(r.Usage)
	l.pos++
	return true, nil
}

func (l *loop) record(ctx context.Context, role Role, kind string, msg any, u Usage) error {
	b, err := json.Marshal(msg)
	if err != nil {
		return err
	}
	r := Record{Role: role, Kind: kind, Message: b, Usage: u}
	if err := l.j.Append(ctx, r); err != nil {
		return fmt.Errorf("recording the %s step: %w", kind, err)
	}
	l.recs = append(l.recs, r)
	l.pos = len(l.recs)
	return nil
}

// over is the budget check between the model calls of one coder step:
// the step's usage and calls so far count as if recorded.
func (l *loop) over(used Usage, calls int) string {
	usage, steps := l.usage, l.steps
	l.usage, l.steps = l.usage.Add(used), l.steps+calls
	r := l.limit()
	l.usage, l.steps = usage, steps
	return r
}

// limit names the budget that is spent, "" if none.
func (l *loop) limit() string {
	b := l.cfg.Budget
	switch {
	case b.Tokens > 0 && l.usage.Tokens() >= b.Tokens:
		return fmt.Sprintf("token budget: %d of %d tokens used", l.usage.Tokens(), b.Tokens)
	case b.CostUSD > 0 && l.usage.CostUSD >= b.CostUSD:
		return fmt.Sprintf("cost budget: $%.4f of $%.4f spent", l.usage.CostUSD, b.CostUSD)
	case b.Steps > 0 && l.steps >= b.Steps:
		return fmt.Sprintf("step limit: %d steps", b.Steps)
	case b.Wall > 0 && l.cfg.Now().Sub(l.cfg.Started) >= b.Wall:
		return fmt.Sprintf("wall-clock budget: %s", b.Wall)
	}
	return ""
}

// ctxReason says why ctx ended: the wall-clock budget's deadline, or a
// cancel.
func (l *loop) ctxReason(ctx context.Context) (string, string) {
	if errors.Is(ctx.Err(), context.DeadlineExceeded) && l.cfg.Budget.Wall > 0 {
		return fmt.Sprintf("wall-clock budget: %s", l.cfg.Budget.Wall), "a step was cut short"
	}
	return StopCanceled, context.Cause(ctx).Error()
}
