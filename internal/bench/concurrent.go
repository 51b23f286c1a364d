package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"

	"github.com/agentbox/agentbox/internal/sandbox"
	"github.com/agentbox/agentbox/internal/store"
)

// Concurrent cases.
const (
	CaseConcurrentAgentbox = "agentbox N x (create + exec true)"
	CaseConcurrentDocker   = "N x docker run --rm IMG true"
)

// Concurrent measures, per backend, the wall time of creating
// opts.Concurrency sandboxes at once (one per workspace) and running
// `true` in each, against as many concurrent `docker run --rm` of `true`
// in equivalent containers (runsc for gvisor, runc for docker and local).
// The sandboxes are removed after the clock stops. Everything made is
// removed before it returns.
func Concurrent(ctx context.Context, opts SandboxOptions, log io.Writer) (res SandboxResult, err error) {
	opts = opts.withDefaults(DefaultConcurrentRuns)
	if err := opts.validate(); err != nil {
		return res, err
	}
	e, err := newEnv(ctx, opts, log, nil)
	if err != nil {
		return res, err
	}
	defer func() { err = errors.Join(err, e.close()) }()
	return e.concurrentBench(ctx)
}

// parallel runs f(0..n-1) at once and joins their errors.
func parallel(n int, f func(i int) error) error {
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { errs[i] = f(i) })
	}
	wg.Wait()
	return errors.Join(errs...)
}

func (e *env) concurrentBench(ctx context.Context) (SandboxResult, error) {
	n := e.opts.Concurrency
	res := SandboxResult{Benchmark: "concurrent", Image: e.opts.Image, Backends: e.backends, Runs: e.opts.Runs, Concurrency: n}
	var cases []tcase
	baseline := map[string]bool{}
	for _, b := range e.backends {
		wss := make([]store.Workspace, n)
		for i := range wss {
			w, err := e.workspace(ctx)
			if err != nil {
				return res, err
			}
			wss[i] = w
		}
		cases = append(cases, tcase{backend: b, name: CaseConcurrentAgentbox, run: func(ctx context.Context) (func() error, error) {
			ids := make([]string, n)
			err := parallel(n, func(i int) error {
				sb, err := e.m.CreateSandbox(ctx, wss[i].ID, sandbox.Spec{Backend: b})
				if err != nil {
					return err
				}
				ids[i] = sb.ID
				return e.execTrue(ctx, sb.ID)
			})
			undo := func() error {
				return parallel(n, func(i int) error {
					if ids[i] == "" {
						return nil
					}
					return e.m.RemoveSandbox(context.WithoutCancel(ctx), ids[i])
				})
			}
			return undo, err
		}})
		if rt := runtimeOf(b); e.dockerOK && !baseline[rt] {
			baseline[rt] = true
			cases = append(cases, tcase{backend: runtimeBackend(rt), name: CaseConcurrentDocker, baseline: true, run: func(ctx context.Context) (func() error, error) {
				return nil, parallel(n, func(i int) error { return e.dockerRun(ctx, rt, e.m.FilesPath(wss[i])) })
			}})
		}
	}
	e.logf("concurrent: %d at once; warm-up, then %d interleaved runs of %d cases", n, e.opts.Runs, len(cases))
	rows, err := e.measure(ctx, cases, 1, e.opts.Runs, quiesce)
	if err != nil {
		return res, err
	}
	res.Rows = rows
	for _, b := range e.backends {
		a, _ := row(rows, b, CaseConcurrentAgentbox)
		if dr, ok := row(rows, runtimeBackend(runtimeOf(b)), CaseConcurrentDocker); ok {
			res.Checks = append(res.Checks, ratioCheck(fmt.Sprintf("%s: agentbox / docker run (%s)", b, runtimeOf(b)), a, dr, 0, 0))
		}
	}
	res.Notes = append(res.Notes, fmt.Sprintf("N = %d; each row is the wall time from the first start to the last result; agentbox runs through the manager, one workspace per sandbox", n))
	return res, nil
}
