package bench

// Density finds how many idle sandboxes one daemon holds on this machine
// while every one of them still answers an exec quickly, and what the
// daemon's memory is then.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"sync"
	"time"

	"github.com/agentbox/agentbox/client"
)

// Defaults and targets of the density benchmark.
const (
	DefaultDensityTarget   = 200
	DefaultDensityStep     = 25
	DefaultDensityParallel = 4
	// DensityExecBound is how fast every idle sandbox must answer `true`.
	DensityExecBound = 100 * time.Millisecond
	// DefaultDensitySettle is the pause before a sweep is repeated: the
	// engine is still busy with the step's creations when the first
	// sweep runs right after them (its shims, cgroups and logs), and
	// the sandboxes are to be measured idle.
	DefaultDensitySettle = 30 * time.Second
	// DensityRSSTarget is the most the daemon's RSS may be at the target.
	DensityRSSTarget = 200 << 20
)

// DensityOptions configure Density. Zero fields take their defaults.
type DensityOptions struct {
	DaemonOptions
	// Target is how many sandboxes to reach (default 200).
	Target int
	// Step is how many sandboxes are added between sweeps (default 25).
	Step int
	// Parallel is how many sandboxes are created at once (default 4).
	Parallel int
	// ExecBound is how fast every sandbox must answer (default
	// DensityExecBound); tests that exercise the path without timing it
	// set it high.
	ExecBound time.Duration
	// Settle is the pause before a sweep that broke the bound is
	// repeated (default DefaultDensitySettle; negative: none).
	Settle time.Duration
}

// DensityStep is the state after one step: the sweep of an exec of `true`
// in every sandbox, one after another, and the daemon's figures.
type DensityStep struct {
	Sandboxes int `json:"sandboxes"`
	// CreateTook is the wall time of creating this step's sandboxes.
	CreateTook time.Duration `json:"create_took_ns"`
	ExecP50    time.Duration `json:"exec_p50_ns"`
	ExecP99    time.Duration `json:"exec_p99_ns"`
	ExecMax    time.Duration `json:"exec_max_ns"`
	// Repeated says the first sweep broke the bound (its slowest exec
	// took FirstMax) and the figures are the repeat's.
	Repeated   bool          `json:"repeated,omitempty"`
	FirstMax   time.Duration `json:"first_max_ns,omitempty"`
	RSS        int64         `json:"rss_bytes"`
	HeapInuse  int64         `json:"heap_inuse_bytes"`
	Goroutines int           `json:"goroutines"`
	FDs        int           `json:"fds"`
}

// DensityResult is what Density measured.
type DensityResult struct {
	Target    int           `json:"target"`
	Image     string        `json:"image"`
	ExecBound time.Duration `json:"exec_bound_ns"`
	// Reached is the largest count at which every sandbox answered
	// within DensityExecBound.
	Reached int `json:"reached"`
	// Base is the daemon before any sandbox.
	Base   DensityStep   `json:"base"`
	Steps  []DensityStep `json:"steps"`
	Checks []LoadCheck   `json:"checks"`
	// StopReason says why the run ended before Target, if it did.
	StopReason string `json:"stop_reason,omitempty"`
	// Teardown is how every sandbox and workspace of the run went away.
	Teardown DensityTeardown `json:"teardown"`
}

// OK says whether every check held.
func (r DensityResult) OK() bool {
	return len(r.Checks) > 0 && !slices.ContainsFunc(r.Checks, func(c LoadCheck) bool { return !c.Met })
}

// Density starts a daemon and adds idle docker sandboxes (one per
// workspace) in steps of opts.Step. After each step it runs `true` in
// every sandbox, one at a time, through the API, and reads the daemon's
// RSS, heap, goroutines and fds. It stops at opts.Target or at the first
// step whose sweep has an exec slower than DensityExecBound (a sweep
// that breaks the bound is repeated once, after opts.Settle, as the
// machine is shared and the step's creations may still be settling; the
// step fails only if the repeat breaks it too). Then it removes
// every workspace, timed, and looks for anything the run left on the
// machine (a check of the result); close removes whatever that was.
func Density(ctx context.Context, opts DensityOptions, log io.Writer) (res DensityResult, err error) {
	if opts.Target == 0 {
		opts.Target = DefaultDensityTarget
	}
	if opts.Step == 0 {
		opts.Step = DefaultDensityStep
	}
	if opts.Parallel == 0 {
		opts.Parallel = DefaultDensityParallel
	}
	if opts.ExecBound == 0 {
		opts.ExecBound = DensityExecBound
	}
	if opts.Settle == 0 {
		opts.Settle = DefaultDensitySettle
	}
	if opts.Target < 1 || opts.Step < 1 || opts.Parallel < 1 {
		return res, fmt.Errorf("bench: target (%d), step (%d) and parallel (%d) must be positive", opts.Target, opts.Step, opts.Parallel)
	}
	if log == nil {
		log = io.Discard
	}
	before := snapshotHost()
	d, err := startDaemon(ctx, opts.DaemonOptions, 10, log)
	if err != nil {
		return res, err
	}
	defer func() { err = errors.Join(err, d.close()) }()
	res = DensityResult{Target: opts.Target, Image: d.opts.Image, ExecBound: opts.ExecBound}
	if res.Base, err = d.densityFigures(ctx); err != nil {
		return res, err
	}
	var sbs []string
	for len(sbs) < opts.Target {
		n := min(opts.Step, opts.Target-len(sbs))
		start := time.Now()
		made, err := d.createIdle(ctx, n, opts.Parallel)
		sbs = append(sbs, made...)
		if err != nil {
			res.StopReason = fmt.Sprintf("creating sandbox %d: %v", len(sbs)+1, err)
			break
		}
		st, err := d.densityFigures(ctx)
		if err != nil {
			return res, err
		}
		st.CreateTook = time.Since(start)
		lat, err := d.sweep(ctx, sbs)
		if err == nil && lat[len(lat)-1] > opts.ExecBound {
			settle := max(opts.Settle, 0)
			fmt.Fprintf(log, "  %d sandboxes: slowest exec %s, sweeping again in %s\n", len(sbs), fmtDur(lat[len(lat)-1]), settle)
			st.Repeated, st.FirstMax = true, lat[len(lat)-1]
			select {
			case <-ctx.Done():
				return res, ctx.Err()
			case <-time.After(settle):
			}
			lat, err = d.sweep(ctx, sbs)
		}
		if err != nil {
			res.StopReason = fmt.Sprintf("exec at %d sandboxes: %v", len(sbs), err)
			break
		}
		st.Sandboxes = len(sbs)
		st.ExecP50, st.ExecP99, st.ExecMax = lat[len(lat)/2], lat[min(len(lat)-1, len(lat)*99/100)], lat[len(lat)-1]
		res.Steps = append(res.Steps, st)
		fmt.Fprintf(log, "  %d sandboxes: exec p50 %s p99 %s max %s; daemon rss %s, heap %s, %d goroutines, %d fds\n",
			st.Sandboxes, fmtDur(st.ExecP50), fmtDur(st.ExecP99), fmtDur(st.ExecMax), fmtMiB(st.RSS), fmtMiB(st.HeapInuse), st.Goroutines, st.FDs)
		if st.ExecMax > opts.ExecBound {
			res.StopReason = fmt.Sprintf("at %d sandboxes the slowest exec took %s (bound %s)", len(sbs), fmtDur(st.ExecMax), fmtDur(opts.ExecBound))
			break
		}
		res.Reached = len(sbs)
	}
	res.Teardown = d.teardown(ctx, before, log)
	res.summarize()
	return res, nil
}

// densityFigures reads the daemon's RSS, heap, goroutines and fds.
func (d *daemonProc) densityFigures(ctx context.Context) (DensityStep, error) {
	var st DensityStep
	var err error
	if st.RSS, err = d.rss(); err != nil {
		return st, err
	}
	if st.FDs, err = d.fds(); err != nil {
		return st, err
	}
	m, err := d.scrape(ctx, metricHeapInuse, metricGoroutines)
	if err != nil {
		return st, err
	}
	st.HeapInuse, st.Goroutines = int64(m[metricHeapInuse]), int(m[metricGoroutines])
	return st, nil
}

// createIdle makes n workspaces with a docker sandbox each, parallel at
// once, and returns the sandboxes made.
func (d *daemonProc) createIdle(ctx context.Context, n, parallelism int) ([]string, error) {
	var mu sync.Mutex
	var made []string
	sem := make(chan struct{}, parallelism)
	err := parallel(n, func(int) error {
		sem <- struct{}{}
		defer func() { <-sem }()
		ws, err := d.c.CreateWorkspace(ctx, client.CreateWorkspace{Repo: d.repo, Task: "density"})
		if err != nil {
			return err
		}
		sb, err := d.c.CreateSandbox(ctx, client.CreateSandbox{Workspace: ws.ID, Backend: "docker", Image: d.opts.Image})
		d.saw(sb.ID)
		if err != nil {
			return err
		}
		mu.Lock()
		made = append(made, sb.ID)
		mu.Unlock()
		return nil
	})
	return made, err
}

// sweep runs `true` in every sandbox, one after another, and returns the
// latencies sorted. A failed exec, or one that ran in a replacement, is
// an error.
func (d *daemonProc) sweep(ctx context.Context, sbs []string) ([]time.Duration, error) {
	lat := make([]time.Duration, 0, len(sbs))
	for _, id := range sbs {
		start := time.Now()
		r, err := d.c.Exec(ctx, id, client.Exec{Argv: []string{"true"}}, io.Discard, io.Discard)
		took := time.Since(start)
		d.saw(r.SandboxID)
		if err == nil && (r.ExitCode != 0 || r.Replaced || r.SandboxID != id) {
			err = fmt.Errorf("true in %s: exit %d, ran in %s (replaced %v)", id, r.ExitCode, r.SandboxID, r.Replaced)
		}
		if err != nil {
			return nil, err
		}
		lat = append(lat, took)
	}
	slices.Sort(lat)
	return lat, nil
}

func (r *DensityResult) summarize() {
	var at DensityStep
	for _, s := range r.Steps {
		if s.Sandboxes == r.Reached {
			at = s
		}
	}
	perSandbox := "n/a"
	if r.Reached > 0 {
		perSandbox = fmt.Sprintf("%.0f KiB", float64(at.RSS-r.Base.RSS)/float64(r.Reached)/(1<<10))
	}
	r.Checks = []LoadCheck{
		{Name: "idle sandboxes, each answering within " + fmtDur(r.ExecBound), Value: fmt.Sprint(r.Reached), Target: fmt.Sprintf(">= %d", r.Target), Met: r.Reached >= r.Target},
		{Name: "daemon rss at that count", Value: fmtMiB(at.RSS) + " (" + perSandbox + "/sandbox)", Target: "<= " + fmtMiB(DensityRSSTarget), Met: r.Reached > 0 && at.RSS <= DensityRSSTarget},
		{Name: "teardown: nothing left", Value: fmt.Sprintf("%d left, %v", len(r.Teardown.Left), r.Teardown.Took.Round(time.Millisecond)),
			Target: "0 in " + r.Teardown.Deadline.String(), Met: r.Teardown.Clean()},
	}
}

// Print writes the result as tables.
func (r DensityResult) Print(w io.Writer) {
	fmt.Fprintf(w, "agentbox bench density: idle docker sandboxes (%s) on one daemon, `true` in every one after each step, one at a time\n\n", r.Image)
	fmt.Fprintf(w, "%9s %10s %10s %10s %10s %10s %10s %10s %6s\n", "sandboxes", "create", "exec p50", "exec p99", "exec max", "rss", "heap", "goroutines", "fds")
	row := func(s DensityStep) {
		rep := ""
		if s.Repeated {
			rep = " (swept again after a pause: first max " + fmtDur(s.FirstMax) + ")"
		}
		fmt.Fprintf(w, "%9d %10s %10s %10s %10s %10s %10s %10d %6d%s\n", s.Sandboxes, fmtDur(s.CreateTook), fmtDur(s.ExecP50), fmtDur(s.ExecP99), fmtDur(s.ExecMax),
			fmtMiB(s.RSS), fmtMiB(s.HeapInuse), s.Goroutines, s.FDs, rep)
	}
	row(r.Base)
	for _, s := range r.Steps {
		row(s)
	}
	if r.StopReason != "" {
		fmt.Fprintf(w, "\nstopped: %s\n", r.StopReason)
	}
	t := r.Teardown
	fmt.Fprintf(w, "\nteardown: %d workspaces, %d at a time, in %s (deadline %s)\n", t.Workspaces, t.Parallel, t.Took.Round(time.Millisecond), t.Deadline)
	if t.Error != "" {
		fmt.Fprintf(w, "  failed: %s\n", t.Error)
	}
	for _, l := range t.Left {
		fmt.Fprintf(w, "  left: %s\n", l)
	}
	cw := len("check")
	for _, c := range r.Checks {
		cw = max(cw, len(c.Name))
	}
	fmt.Fprintf(w, "\n%-*s %-28s %-12s\n", cw, "check", "value", "target")
	for _, c := range r.Checks {
		fmt.Fprintf(w, "%-*s %-28s %-12s %s\n", cw, c.Name, c.Value, c.Target, verdict(c.Met))
	}
}
