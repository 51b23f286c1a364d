package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"strings"
	"time"

	"github.com/agentbox/agentbox/client"
	"github.com/agentbox/agentbox/internal/guest"
	"github.com/agentbox/agentbox/internal/sandbox"
)

// Exec round trip cases.
const (
	CaseExecManager = "agentbox exec (manager)"
	CaseExecAPI     = "agentbox exec (API)"
	CaseDockerExec  = "docker exec CTR true"
	CaseHostExec    = "fork/exec /bin/true"
	// CaseSandboxExec is the sandbox's own fork/exec of /bin/true, from a
	// shell inside it, under the same filter as every command: the floor
	// of an exec on that backend.
	CaseSandboxExec = "fork/exec /bin/true inside"
)

// Exec round trip targets.
const (
	// TargetExecMedian is the bound on the API's median on a backend
	// without one of its own in targetExecMedian.
	TargetExecMedian = 3 * time.Millisecond
	// TargetExecSpeedup is how many times faster than docker exec on an
	// equivalent running container an exec through the API should be.
	TargetExecSpeedup = 20.0
)

// targetExecMedian is the bound on the API's median per backend (issue 18:
// 0.8 ms on docker and local, 2 ms on gVisor).
var targetExecMedian = map[string]time.Duration{
	BackendDocker: 800 * time.Microsecond,
	BackendLocal:  800 * time.Microsecond,
	BackendGVisor: 2 * time.Millisecond,
}

// sandboxLoop is how many fork/execs one sample of CaseSandboxExec times.
const sandboxLoop = 20

// execTrueReq is the command every exec benchmark runs.
var execTrueReq = guest.ExecRequest{Argv: []string{"true"}, Timeout: 30 * time.Second}

// Exec measures the round trip of `true` in a running sandbox of each
// backend, through the manager and through the HTTP API on a unix socket,
// against `docker exec` on an equivalent running container (same image,
// user, limits; the runsc runtime for gvisor, runc for docker and local)
// and a bare fork/exec of /bin/true on the host. log receives progress
// (nil discards it). Everything made is removed before it returns.
func Exec(ctx context.Context, opts SandboxOptions, log io.Writer) (res SandboxResult, err error) {
	opts = opts.withDefaults(DefaultExecRuns)
	if err := opts.validate(); err != nil {
		return res, err
	}
	e, err := newEnv(ctx, opts, log, nil)
	if err != nil {
		return res, err
	}
	defer func() { err = errors.Join(err, e.close()) }()
	return e.execBench(ctx)
}

func (e *env) execBench(ctx context.Context) (SandboxResult, error) {
	res := SandboxResult{Benchmark: "exec", Image: e.opts.Image, Backends: e.backends, Runs: e.opts.Runs}
	var cases []tcase
	baselineCtr := map[string]string{} // runtime -> container
	var sbs []string
	// Nothing of this benchmark runs on into the next one (bench all).
	defer func() {
		bg := context.WithoutCancel(ctx)
		for _, id := range sbs {
			e.m.RemoveSandbox(bg, id)
		}
		for _, ctr := range baselineCtr {
			e.dockerOut(bg, "rm", "-f", ctr)
		}
	}()
	for _, b := range e.backends {
		w, err := e.workspace(ctx)
		if err != nil {
			return res, err
		}
		sb, err := e.m.CreateSandbox(ctx, w.ID, sandbox.Spec{Backend: b})
		if err != nil {
			return res, fmt.Errorf("bench: %s sandbox: %w", b, err)
		}
		sbs = append(sbs, sb.ID)
		cases = append(cases,
			tcase{backend: b, name: CaseExecManager, run: func(ctx context.Context) (func() error, error) {
				return nil, e.execTrue(ctx, sb.ID)
			}},
			tcase{backend: b, name: CaseExecAPI, run: func(ctx context.Context) (func() error, error) {
				r, err := e.c.Exec(ctx, sb.ID, client.Exec{Argv: []string{"true"}}, nil, nil)
				if err == nil && (r.ExitCode != 0 || r.Replaced) {
					err = fmt.Errorf("exec through the API: exit %d, replaced %v", r.ExitCode, r.Replaced)
				}
				return nil, err
			}},
			tcase{backend: b, name: CaseSandboxExec, baseline: true, timed: func(ctx context.Context) (time.Duration, error) {
				return e.forkExecInside(ctx, sb.ID)
			}})
		if !e.dockerOK || e.opts.NoDockerExec {
			continue
		}
		rt := runtimeOf(b)
		if _, ok := baselineCtr[rt]; ok {
			continue // local shares runc's baseline with docker
		}
		ctr, err := e.startIdle(ctx, rt, e.m.FilesPath(w))
		if err != nil {
			return res, err
		}
		baselineCtr[rt] = ctr
		cases = append(cases, tcase{backend: runtimeBackend(rt), name: CaseDockerExec, baseline: true, run: func(ctx context.Context) (func() error, error) {
			out, err := e.dockerCmd(ctx, "exec", ctr, "true").CombinedOutput()
			if err != nil {
				return nil, fmt.Errorf("%v: %s", err, strings.TrimSpace(string(out)))
			}
			return nil, nil
		}})
	}
	cases = append(cases, tcase{backend: BackendHost, name: CaseHostExec, baseline: true, run: func(ctx context.Context) (func() error, error) {
		return nil, exec.CommandContext(ctx, "/bin/true").Run()
	}})
	e.logf("exec: warm-up, then %d interleaved runs of %d cases", e.opts.Runs, len(cases))
	rows, err := e.measure(ctx, cases, 3, e.opts.Runs, nil)
	if err != nil {
		return res, err
	}
	res.Rows = rows
	host, _ := row(rows, BackendHost, CaseHostExec)
	for _, b := range e.backends {
		api, _ := row(rows, b, CaseExecAPI)
		mgr, _ := row(rows, b, CaseExecManager)
		bound, ok := targetExecMedian[b]
		if !ok {
			bound = TargetExecMedian
		}
		res.Checks = append(res.Checks, boundCheck(b+": API median", api, bound))
		if de, ok := row(rows, runtimeBackend(runtimeOf(b)), CaseDockerExec); ok {
			res.Checks = append(res.Checks,
				ratioCheck(b+": docker exec / API (speed-up)", de, api, 0, TargetExecSpeedup),
				ratioCheck(b+": docker exec / manager (speed-up)", de, mgr, 0, 0))
		}
		inside, _ := row(rows, b, CaseSandboxExec)
		res.Checks = append(res.Checks,
			ratioCheck(b+": API / manager (cost of the API)", api, mgr, 0, 0),
			ratioCheck(b+": manager / host fork/exec", mgr, host, 0, 0),
			ratioCheck(b+": API / fork/exec inside", api, inside, 0, 0))
	}
	if e.opts.NoDockerExec {
		res.Notes = append(res.Notes, "docker exec was left out of the rounds (--no-docker-exec)")
	}
	for rt, ctr := range baselineCtr {
		res.Notes = append(res.Notes, fmt.Sprintf("docker exec runs in container %.12s (runtime %s): docker run -d %s -v WORKSPACE:/workspace %s sleep; local is compared with runc", ctr, rt, strings.Join(dockerLimitArgs("RUN", rt), " "), e.opts.Image))
	}
	return res, nil
}

// forkExecInside times the sandbox's own fork/exec of /bin/true: a shell
// in it runs the program sandboxLoop+1 times and once, both through the
// manager, and the difference is divided out, so what an exec itself
// costs cancels.
func (e *env) forkExecInside(ctx context.Context, target string) (time.Duration, error) {
	loop := func(n int) (time.Duration, error) {
		req := guest.ExecRequest{Argv: []string{"/bin/sh", "-c", `i=0; while [ $i -lt $1 ]; do /bin/true; i=$((i+1)); done`, "sh", fmt.Sprint(n)}, Timeout: 30 * time.Second}
		start := time.Now()
		err := e.execOK(ctx, target, req)
		return time.Since(start), err
	}
	many, err := loop(sandboxLoop + 1)
	if err != nil {
		return 0, err
	}
	one, err := loop(1)
	if err != nil {
		return 0, err
	}
	return max(many-one, 0) / sandboxLoop, nil
}

// startIdle starts a long-running container equivalent to a sandbox for
// the docker exec baseline; close removes it by its label.
func (e *env) startIdle(ctx context.Context, runtime, files string) (string, error) {
	args := append([]string{"run", "-d", "--rm"}, dockerLimitArgs(e.runID, runtime)...)
	args = append(args, "-v", files+":/workspace", e.opts.Image, "sleep", "86400")
	ctr, err := e.dockerOut(ctx, args...)
	if err != nil {
		return "", fmt.Errorf("bench: starting the docker exec baseline container: %w", err)
	}
	return ctr, nil
}
