package bench

// The suite benchmark: a real test suite, part of networkx's own, run in a
// sandbox of each backend and on the host, side by side, in one run. It is
// what an agent spends its time on, so it is where a sandbox's cost on
// file access, process start and CPU shows as a whole.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"time"

	"github.com/agentbox/agentbox/internal/guest"
	"github.com/agentbox/agentbox/internal/image"
	"github.com/agentbox/agentbox/internal/sandbox"
)

// Suite cases.
const (
	CaseSuiteSandbox = "pytest networkx (1,929 tests) in a sandbox"
	CaseSuiteHost    = "the same in a chroot of the image (uid 1000)"
)

// Suite defaults and targets.
const (
	// DefaultSuiteRuns is low: each run takes 20-30 s per case.
	DefaultSuiteRuns = 3
	// TargetSuiteRatio bounds a backend's median over the host's: docker
	// and local.
	TargetSuiteRatio = 1.1
	// TargetSuiteRatioGVisor is gVisor's bound.
	TargetSuiteRatioGVisor = 1.5
)

// suiteLimits are the sandboxes' limits: the suite needs more than the
// defaults (python's memory, the runner's processes).
var suiteLimits = sandbox.Limits{MemoryBytes: 2 << 30, CPUs: 2, Pids: 1024}

// suiteTests are the parts of networkx's suite that run: 1,929 tests.
const suiteTests = "networkx/algorithms/shortest_paths networkx/algorithms/flow networkx/classes networkx/algorithms/isomorphism"

// suiteScript runs the suite from a copy of networkx in $1 (the work
// directory), with further pytest arguments after it, and exits with
// pytest's status; the copy is removed either way.
const suiteScript = `d=$1; shift; rm -rf "$d/networkx" && cp -r /usr/lib/python3/dist-packages/networkx "$d/" && cd "$d" &&
python3 -m pytest -q -p no:cacheprovider "$@" ` + suiteTests + `
s=$?; rm -rf "$d/networkx"; exit $s`

// suiteEnv is the environment the suite runs with, in a sandbox and on
// the host alike.
var suiteEnv = []string{sandboxPath, "HOME=/tmp"}

// suiteRun runs the suite once in one place, with extra pytest
// arguments, and returns pytest's output; an error carries its tail.
type suiteRun func(ctx context.Context, pytestArgs ...string) (string, error)

// Suite measures part of networkx's own test suite (1,929 tests of
// shortest paths, flow, graph classes and isomorphism, from Debian's
// python3-networkx) in a sandbox of each backend, running the tool image
// (image.ToolsName, built when missing) with 2 GiB, 2 CPUs and 1024
// processes, against the same suite on the host: a chroot, in a private
// mount namespace, into the same image's unpacked root, as the sandbox
// user. opts.Image, when set to anything but DefaultImage (the CLI's
// default), names another image with python3, pytest and networkx. The
// suite must pass in every run. log receives progress (nil discards it).
// Everything made is removed before it returns.
func Suite(ctx context.Context, opts SandboxOptions, log io.Writer) (res SandboxResult, err error) {
	if opts.Image == "" || opts.Image == DefaultImage {
		opts.Image = image.ToolsName
	}
	opts = opts.withDefaults(DefaultSuiteRuns)
	if err := opts.validate(); err != nil {
		return res, err
	}
	if opts.Image == image.ToolsName {
		// newEnv builds only the plain images; this one takes apt.
		bctx, cancel := context.WithTimeout(ctx, 20*time.Minute)
		_, err := image.Build(bctx, image.ToolsOptions(filepath.Join(image.DefaultCache, "..", "debootstrap"), log))
		cancel()
		if err != nil {
			return res, fmt.Errorf("bench: %w", err)
		}
	}
	e, err := newEnv(ctx, opts, log, nil)
	if err != nil {
		return res, err
	}
	defer func() { err = errors.Join(err, e.close()) }()
	return e.suiteBench(ctx)
}

func (e *env) suiteBench(ctx context.Context) (SandboxResult, error) {
	img := e.opts.Image
	res := SandboxResult{Benchmark: "suite", Image: img, Backends: e.backends, Runs: e.opts.Runs}
	host, release, err := hostSuite(ctx, img)
	if err != nil {
		return res, err
	}
	defer release()
	type target struct {
		backend, name string
		run           suiteRun
	}
	targets := []target{{BackendHost, CaseSuiteHost, host}}
	var sbs []string
	// Nothing of this benchmark runs on into the next one.
	defer func() {
		for _, id := range sbs {
			e.m.RemoveSandbox(context.WithoutCancel(ctx), id)
		}
	}()
	for _, b := range e.backends {
		w, err := e.workspace(ctx)
		if err != nil {
			return res, err
		}
		sb, err := e.m.CreateSandbox(ctx, w.ID, sandbox.Spec{Backend: b, Image: img, Limits: suiteLimits})
		if err != nil {
			return res, fmt.Errorf("bench: %s sandbox of %s: %w", b, img, err)
		}
		sbs = append(sbs, sb.ID)
		targets = append(targets, target{b, CaseSuiteSandbox, func(ctx context.Context, pytestArgs ...string) (string, error) {
			var stdout, stderr bytes.Buffer
			argv := append([]string{"bash", "-c", suiteScript, "suite", sandbox.WorkspaceDir}, pytestArgs...)
			r, err := e.m.Exec(ctx, sb.ID, guest.ExecRequest{Argv: argv, Env: suiteEnv, Timeout: 10 * time.Minute}, nil, &stdout, &stderr)
			out := stdout.String() + stderr.String()
			if err != nil {
				return out, err
			}
			if r.ExitCode != 0 || r.Signal != 0 || r.Lost || r.Replaced {
				return out, fmt.Errorf("pytest: exit %d, signal %d, lost %v, replaced %v: %s", r.ExitCode, r.Signal, r.Lost, r.Replaced, lastBytes(out, 2000))
			}
			return out, nil
		}})
	}

	// Untimed: collecting the tests reads and compiles everything the
	// suite imports, so that no case's first run pays a cold page cache.
	if !e.noWarmup {
		e.logf("suite: warm-up (pytest --collect-only in each of %d places)", len(targets))
		for _, t := range targets {
			if _, err := t.run(ctx, "--collect-only"); err != nil {
				return res, fmt.Errorf("bench: %s: collecting the suite: %w", t.backend, err)
			}
		}
	}
	summaries := map[string]string{} // backend -> pytest's last line, its time cut
	var cases []tcase
	for _, t := range targets {
		cases = append(cases, tcase{backend: t.backend, name: t.name, baseline: t.backend == BackendHost, run: func(ctx context.Context) (func() error, error) {
			out, err := t.run(ctx)
			if err != nil {
				return nil, err
			}
			summaries[t.backend] = pytestSummary(out)
			return nil, nil
		}})
	}
	e.logf("suite: %d interleaved runs of %d cases (20-30 s each)", e.opts.Runs, len(cases))
	rows, err := e.measure(ctx, cases, 0, e.opts.Runs, nil)
	if err != nil {
		return res, err
	}
	res.Rows = rows
	hostRow, _ := row(rows, BackendHost, CaseSuiteHost)
	for _, b := range e.backends {
		r, _ := row(rows, b, CaseSuiteSandbox)
		target := TargetSuiteRatio
		if b == BackendGVisor {
			target = TargetSuiteRatioGVisor
		}
		res.Checks = append(res.Checks, ratioCheck(b+": sandbox / host", r, hostRow, target, 0))
	}
	// The same tests ran and passed everywhere, or the times compare
	// different work.
	for _, t := range targets {
		res.Notes = append(res.Notes, fmt.Sprintf("pytest in %s: %s", t.backend, summaries[t.backend]))
		if summaries[t.backend] != summaries[BackendHost] {
			return res, fmt.Errorf("bench: pytest in %s says %q, on the host %q", t.backend, summaries[t.backend], summaries[BackendHost])
		}
	}
	res.Notes = append(res.Notes,
		"the suite: python3 -m pytest -q -p no:cacheprovider "+suiteTests+", in a fresh copy of /usr/lib/python3/dist-packages/networkx (in /workspace in a sandbox, in a fresh tmpfs /tmp on the host)",
		fmt.Sprintf("host: unshare -m, /proc, /dev and a tmpfs /tmp mounted in the image's unpacked root, then chroot --userspec=%d:%d with PATH and HOME only", sandboxUID, sandboxUID),
		fmt.Sprintf("sandboxes: %d CPUs, %d MiB, %d processes", int(suiteLimits.CPUs), suiteLimits.MemoryBytes>>20, suiteLimits.Pids))
	return res, nil
}

// pytestSummary is pytest's last line without its time ("1929 passed,
// 3 skipped"), what must be the same everywhere.
func pytestSummary(out string) string {
	lines := strings.Split(strings.TrimSpace(out), "\n")
	last := strings.Trim(strings.TrimSpace(lines[len(lines)-1]), "= ")
	if i := strings.LastIndex(last, " in "); i > 0 {
		last = last[:i]
	}
	return last
}
