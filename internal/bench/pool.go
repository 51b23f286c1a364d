package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/agentbox/agentbox/client"
	"github.com/agentbox/agentbox/internal/manager"
	"github.com/agentbox/agentbox/internal/sandbox"
)

// Warm pool cases.
const (
	CasePoolClaim = "agentbox create from the warm pool + exec true (manager)"
	CasePoolCold  = "agentbox cold create + exec true (manager)"
	CasePoolExec  = "agentbox exec true in a running sandbox (manager)"
	CasePoolAPI   = "agentbox create from the warm pool + exec true (API)"
)

// Warm pool defaults and target.
const (
	DefaultPoolRuns = 20
	// poolSize is the benchmark's pool: one is enough, since every claim
	// waits (untimed) for the refill.
	poolSize = 1
	// TargetPoolClaim bounds the median of claim → first exec on docker.
	TargetPoolClaim = 10 * time.Millisecond
	// TargetPoolBwrap bounds the median of claim → first exec on local
	// over a bare bubblewrap run of `true` (CaseBwrap).
	TargetPoolBwrap = 1.5
	// poolRefillTimeout bounds the untimed wait for a refill.
	poolRefillTimeout = 2 * time.Minute
)

// poolBackends are the backends whose environments can be pooled.
var poolBackends = []string{BackendDocker, BackendLocal}

// Pool measures, on one backend whose environments can be pooled (docker,
// the default, or local), creating a sandbox on an existing workspace and
// running `true` in it when a warm pool has an environment ready, against
// the same with a cold start, in one run; on local, against a bare
// bubblewrap run of `true` too. The pool is refilled between runs,
// untimed; a run that does not get a pooled environment is an error.
func Pool(ctx context.Context, opts SandboxOptions, log io.Writer) (res SandboxResult, err error) {
	opts = opts.withDefaults(DefaultPoolRuns)
	if err := opts.validate(); err != nil {
		return res, err
	}
	switch {
	case len(opts.Backends) == 0:
		opts.Backends = []string{BackendDocker}
	case len(opts.Backends) != 1 || !slices.Contains(poolBackends, opts.Backends[0]):
		return res, fmt.Errorf("bench pool: one backend at a time, of those that pool environments: %s (gvisor starts cold)", strings.Join(poolBackends, ", "))
	}
	opts.warmPool = []manager.PoolSpec{{Backend: opts.Backends[0], Image: opts.Image, Size: poolSize}}
	e, err := newEnv(ctx, opts, log, nil)
	if err != nil {
		return res, err
	}
	defer func() { err = errors.Join(err, e.close()) }()
	return e.poolBench(ctx)
}

func (e *env) poolBench(ctx context.Context) (SandboxResult, error) {
	res := SandboxResult{Benchmark: "pool", Image: e.opts.Image, Backends: e.backends, Runs: e.opts.Runs}
	b := e.backends[0]
	w, err := e.workspace(ctx)
	if err != nil {
		return res, err
	}
	// Another class than the pool's (one pid less of limit), so that the
	// same create starts cold: everything else is the same.
	coldSpec := sandbox.Spec{Backend: b, Limits: sandbox.Limits{Pids: sandbox.DefaultLimits.Pids - 1}}
	hits := func() int64 {
		var n int64
		for _, s := range e.m.PoolStatus() {
			n += s.Hits
		}
		return n
	}
	cases := []tcase{
		{backend: b, name: CasePoolClaim, run: func(ctx context.Context) (func() error, error) {
			before := hits()
			sb, err := e.m.CreateSandbox(ctx, w.ID, sandbox.Spec{Backend: b})
			if err != nil {
				return nil, err
			}
			undo := func() error { return e.m.RemoveSandbox(context.WithoutCancel(ctx), sb.ID) }
			if err := e.execTrue(ctx, sb.ID); err != nil {
				return undo, err
			}
			if hits() != before+1 {
				return undo, fmt.Errorf("sandbox %s did not come from the warm pool", sb.ID)
			}
			return undo, nil
		}},
		{backend: b, name: CasePoolAPI, run: func(ctx context.Context) (func() error, error) {
			before := hits()
			sb, err := e.c.CreateSandbox(ctx, client.CreateSandbox{Workspace: w.ID, Backend: b})
			if err != nil {
				return nil, err
			}
			undo := func() error { return e.c.RemoveSandbox(context.WithoutCancel(ctx), sb.ID) }
			r, err := e.c.Exec(ctx, sb.ID, client.Exec{Argv: []string{"true"}}, nil, nil)
			if err == nil && (r.ExitCode != 0 || r.Replaced) {
				err = fmt.Errorf("exec through the API: exit %d, replaced %v", r.ExitCode, r.Replaced)
			}
			if err == nil && hits() != before+1 {
				err = fmt.Errorf("sandbox %s did not come from the warm pool", sb.ID)
			}
			return undo, err
		}},
		{backend: b, name: CasePoolCold, baseline: true, run: func(ctx context.Context) (func() error, error) {
			sb, err := e.m.CreateSandbox(ctx, w.ID, coldSpec)
			if err != nil {
				return nil, err
			}
			undo := func() error { return e.m.RemoveSandbox(context.WithoutCancel(ctx), sb.ID) }
			return undo, e.execTrue(ctx, sb.ID)
		}},
	}
	// The floor: the first exec alone, in a sandbox that runs already.
	wr, err := e.workspace(ctx)
	if err != nil {
		return res, err
	}
	running, err := e.m.CreateSandbox(ctx, wr.ID, coldSpec)
	if err != nil {
		return res, err
	}
	cases = append(cases, tcase{backend: b, name: CasePoolExec, baseline: true, run: func(ctx context.Context) (func() error, error) {
		return nil, e.execTrue(ctx, running.ID)
	}})
	if b == BackendLocal {
		// The yardstick: the same jail, bare.
		c, ok := e.bwrapCase(e.m.FilesPath(w))
		if !ok {
			return res, fmt.Errorf("bench pool: no bubblewrap or root file system for the %s baseline", CaseBwrap)
		}
		cases = append(cases, c)
	}
	var refillErr error
	settle := func() {
		quiesce()
		if err := e.waitPool(ctx); err != nil && refillErr == nil {
			refillErr = err
		}
	}
	settle()
	e.logf("pool: warm-up, then %d interleaved runs of %d cases", e.opts.Runs, len(cases))
	rows, err := e.measure(ctx, cases, 1, e.opts.Runs, settle)
	if err == nil {
		err = refillErr
	}
	if err != nil {
		return res, err
	}
	res.Rows = rows
	warm, _ := row(rows, b, CasePoolClaim)
	cold, _ := row(rows, b, CasePoolCold)
	floor, _ := row(rows, b, CasePoolExec)
	api, _ := row(rows, b, CasePoolAPI)
	if b == BackendLocal {
		bw, _ := row(rows, b, CaseBwrap)
		res.Checks = append(res.Checks,
			ratioCheck(b+": claim → first exec / bwrap", warm, bw, TargetPoolBwrap, 0),
			ratioCheck(b+": claim → first exec / bwrap (API)", api, bw, 0, 0),
			ratioCheck(b+": cold / bwrap", cold, bw, 0, 0))
	} else {
		res.Checks = append(res.Checks,
			boundCheck(b+": claim → first exec median", warm, TargetPoolClaim),
			boundCheck(b+": claim → first exec median (API)", api, TargetPoolClaim))
	}
	res.Checks = append(res.Checks,
		ratioCheck(b+": warm / cold", warm, cold, 0, 0),
		ratioCheck(b+": warm / exec in a running sandbox", warm, floor, 0, 0))
	res.Notes = append(res.Notes,
		fmt.Sprintf("warm: CreateSandbox on an existing workspace with a pool of %d ready environment(s) of its class (the workspace attached by mount propagation), then Exec `true` until its result", poolSize),
		"API: the same through the daemon's HTTP API on its unix socket (POST /v1/sandboxes, then POST .../exec)",
		"cold: the same with a spec of another class (pids limit one lower), which no pool holds: a cold start",
		"exec: Exec `true` in a sandbox started before the runs (the floor under both)",
		"the sandbox is removed and the pool refilled after the clock stops")
	if b == BackendLocal {
		res.Notes = append(res.Notes, bwrapNote)
	}
	return res, nil
}

// waitPool waits until every warm pool is full.
func (e *env) waitPool(ctx context.Context) error {
	deadline := time.Now().Add(poolRefillTimeout)
	for {
		full := true
		for _, s := range e.m.PoolStatus() {
			if s.Disabled != "" {
				return fmt.Errorf("bench pool: the %s pool is disabled: %s", s.Backend, s.Disabled)
			}
			full = full && s.Ready >= s.Size
		}
		if full {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("bench pool: the pool was not refilled within %s", poolRefillTimeout)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(10 * time.Millisecond):
		}
	}
}
