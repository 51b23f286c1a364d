package bench

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"

	"github.com/agentbox/agentbox/internal/backend/kubernetes"
	"github.com/agentbox/agentbox/internal/sandbox"
)

// BackendKubernetes is measured only when named (--backend kubernetes)
// and given a cluster (SandboxOptions.Kubeconfig): a cluster is never
// found by looking around.
const BackendKubernetes = kubernetes.Name

// CaseKubectlRun is the kubernetes backend's baseline.
const CaseKubectlRun = "kubectl run IMG true (until Succeeded)"

// benchNamespace holds the benchmark's pods and baseline pods.
const benchNamespace = "agentbox-bench"

// knownBackend reports whether b can be named to a benchmark.
func knownBackend(b string) bool { return slices.Contains(AllBackends, b) || b == BackendKubernetes }

// openKubernetes is the kubernetes backend on the cluster of
// e.opts.Kubeconfig, in the benchmark's namespace, on this node.
func (e *env) openKubernetes(ctx context.Context) (sandbox.Backend, func() error, error) {
	if e.opts.Kubeconfig == "" {
		return nil, nil, fmt.Errorf("no kubeconfig (--kubeconfig, or $AGENTBOX_KUBECONFIG)")
	}
	b, err := kubernetes.New(ctx, kubernetes.Options{Kubeconfig: e.opts.Kubeconfig, Namespace: benchNamespace,
		MountDir: filepath.Join(e.root, "binds", BackendKubernetes), RequireNode: true})
	if err != nil {
		return nil, nil, err
	}
	return b, func() error { return nil }, nil
}

var kubectlRuns atomic.Int64

// kubectlRunCase is a bare `kubectl run` of the image running `true`, timed
// until the pod has Succeeded: what a user of the cluster would do without
// agentbox. The pod is deleted after the clock stops, as a sandbox is.
func (e *env) kubectlRunCase() (tcase, bool) {
	kubectl, err := exec.LookPath("kubectl")
	if err != nil {
		k := filepath.Join(filepath.Dir(e.opts.Kubeconfig), "kubectl")
		if kubectl, err = exec.LookPath(k); err != nil {
			return tcase{}, false
		}
	}
	run := func(ctx context.Context, args ...string) error {
		out, err := exec.CommandContext(ctx, kubectl, append([]string{"--kubeconfig", e.opts.Kubeconfig, "-n", benchNamespace}, args...)...).CombinedOutput()
		if err != nil {
			return fmt.Errorf("kubectl %s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
		}
		return nil
	}
	return tcase{backend: BackendKubernetes, name: CaseKubectlRun, baseline: true, run: func(ctx context.Context) (func() error, error) {
		name := fmt.Sprintf("bench-run-%d", kubectlRuns.Add(1))
		undo := func() error { return run(context.WithoutCancel(ctx), "delete", "pod", name, "--wait=true") }
		if err := run(ctx, "run", name, "--image", e.opts.Image, "--image-pull-policy", "Never", "--restart", "Never",
			"--overrides", `{"spec":{"automountServiceAccountToken":false,"enableServiceLinks":false}}`, "--command", "--", "true"); err != nil {
			return nil, err
		}
		return undo, run(ctx, "wait", "--for", "jsonpath={.status.phase}=Succeeded", "--timeout", "2m", "pod/"+name)
	}}, true
}
