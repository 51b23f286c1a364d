package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/agentbox/agentbox/internal/sandbox"
)

// Create → first exec cases.
const (
	CaseCreateExec = "agentbox create + exec true (manager)"
	CaseDockerRun  = "docker run --rm IMG true"
	CaseBwrap      = "bwrap --unshare-all (same root) true"
)

// Create → first exec targets.
const (
	// TargetCreateRatio bounds agentbox over docker run --rm (same runtime).
	TargetCreateRatio = 1.2
	// TargetCreateLocal bounds the local backend's median.
	TargetCreateLocal = 15 * time.Millisecond
)

// Create measures, per backend, creating a sandbox on an existing
// workspace and running `true` in it (the sandbox is removed afterwards,
// untimed), against `docker run --rm` of `true` in an equivalent container
// (runsc for gvisor) and, for local, a bare bubblewrap jail over the same
// root. With opts.Profile > 0 it then profiles that many runs per backend
// in a second, instrumented environment. Everything made is removed
// before it returns.
func Create(ctx context.Context, opts SandboxOptions, log io.Writer) (res SandboxResult, err error) {
	opts = opts.withDefaults(DefaultCreateRuns)
	if err := opts.validate(); err != nil {
		return res, err
	}
	e, err := newEnv(ctx, opts, log, nil)
	if err != nil {
		return res, err
	}
	res, err = e.createBench(ctx)
	if cerr := e.close(); cerr != nil || err != nil {
		return res, errors.Join(err, cerr)
	}
	if opts.Profile > 0 {
		res.Profiles, err = profile(ctx, opts, log)
	}
	return res, err
}

// profile profiles create → first exec in an instrumented environment.
func profile(ctx context.Context, opts SandboxOptions, log io.Writer) (_ []Profile, err error) {
	// The backends that were measured, and no more.
	pe, err := newEnv(ctx, opts, log, &recorder{})
	if err != nil {
		return nil, err
	}
	defer func() { err = errors.Join(err, pe.close()) }()
	return pe.profileCreate(ctx, opts.Profile)
}

func (e *env) createBench(ctx context.Context) (SandboxResult, error) {
	res := SandboxResult{Benchmark: "create", Image: e.opts.Image, Backends: e.backends, Runs: e.opts.Runs}
	// Each backend is measured with its own baselines, apart from the
	// others: what one engine leaves to tear down after its run (a
	// containerd shim, a network namespace the kernel frees in the
	// background) would otherwise land on whatever is timed next.
	var rows []Row
	for _, b := range e.backends {
		w, err := e.workspace(ctx)
		if err != nil {
			return res, err
		}
		cases := []tcase{{backend: b, name: CaseCreateExec, run: func(ctx context.Context) (func() error, error) {
			sb, err := e.m.CreateSandbox(ctx, w.ID, sandbox.Spec{Backend: b})
			if err != nil {
				return nil, err
			}
			undo := func() error { return e.m.RemoveSandbox(context.WithoutCancel(ctx), sb.ID) }
			return undo, e.execTrue(ctx, sb.ID)
		}}}
		files := e.m.FilesPath(w)
		if b == BackendLocal {
			if c, ok := e.bwrapCase(files); ok {
				cases = append(cases, c)
			}
		} else if b == BackendKubernetes {
			if c, ok := e.kubectlRunCase(); ok {
				cases = append(cases, c)
			}
		} else if rt := runtimeOf(b); e.dockerOK {
			cases = append(cases, tcase{backend: runtimeBackend(rt), name: CaseDockerRun, baseline: true, run: func(ctx context.Context) (func() error, error) {
				return nil, e.dockerRun(ctx, rt, files)
			}})
		}
		e.logf("create on %s: warm-up, then %d interleaved runs of %d cases", b, e.opts.Runs, len(cases))
		r, err := e.measure(ctx, cases, 1, e.opts.Runs, quiesce)
		if err != nil {
			return res, err
		}
		rows = append(rows, r...)
	}
	res.Rows = rows
	for _, b := range e.backends {
		a, _ := row(rows, b, CaseCreateExec)
		switch b {
		case BackendLocal:
			res.Checks = append(res.Checks, boundCheck(b+": median", a, TargetCreateLocal))
			if bw, ok := row(rows, b, CaseBwrap); ok {
				res.Checks = append(res.Checks, ratioCheck(b+": agentbox / bwrap", a, bw, 0, 0))
			}
		case BackendKubernetes:
			if kr, ok := row(rows, b, CaseKubectlRun); ok {
				res.Checks = append(res.Checks, ratioCheck(b+": agentbox / kubectl run", a, kr, 0, 0))
			}
		default:
			if dr, ok := row(rows, b, CaseDockerRun); ok {
				res.Checks = append(res.Checks, ratioCheck(b+": agentbox / docker run", a, dr, TargetCreateRatio, 0))
			}
		}
	}
	res.Notes = append(res.Notes,
		"agentbox: CreateSandbox on an existing workspace, then Exec `true` until its result; the sandbox is removed after the clock stops",
		"each backend is measured apart from the others, interleaved only with its own baseline",
		fmt.Sprintf("docker run: docker run --rm %s -v WORKSPACE:/workspace %s true (the same user, limits and mounts as a sandbox; includes the container's removal, which --rm waits for)", strings.Join(dockerLimitArgs("RUN", "RUNTIME"), " "), e.opts.Image))
	if slices.Contains(e.backends, BackendKubernetes) {
		res.Notes = append(res.Notes, "kubectl run: kubectl run NAME --image IMG --image-pull-policy Never --restart Never (no service account token, no service links) --command -- true, then kubectl wait until the pod's phase is Succeeded; the pod is deleted after the clock stops")
	}
	if e.rootfs != "" {
		res.Notes = append(res.Notes, bwrapNote)
	}
	return res, nil
}

// bwrapCase is the local backend's floor: a bare bubblewrap jail of
// `true` over the backend's root file system with the workspace files
// bound. ok is false without bubblewrap or that root.
func (e *env) bwrapCase(files string) (c tcase, ok bool) {
	bw, err := exec.LookPath("bwrap")
	if err != nil || e.rootfs == "" {
		return c, false
	}
	return tcase{backend: BackendLocal, name: CaseBwrap, baseline: true, run: func(ctx context.Context) (func() error, error) {
		out, err := exec.CommandContext(ctx, bw, bwrapArgs(e.rootfs, files)...).CombinedOutput()
		if err != nil {
			return nil, fmt.Errorf("bwrap: %v: %s", err, strings.TrimSpace(string(out)))
		}
		return nil, nil
	}}, true
}

// bwrapNote describes bwrapCase in a result's notes.
var bwrapNote = "bwrap: " + strings.Join(bwrapArgs("ROOTFS", "WORKSPACE"), " ") + " (as root; no cgroups, no seccomp)"

// bwrapArgs jail /bin/true over rootfs with the workspace bound, in every
// namespace: the floor under the local backend.
func bwrapArgs(rootfs, files string) []string {
	return []string{"--unshare-all", "--die-with-parent", "--ro-bind", rootfs, "/", "--proc", "/proc", "--dev", "/dev",
		"--tmpfs", "/tmp", "--bind", files, "/workspace", filepath.Join("/bin", "true")}
}
