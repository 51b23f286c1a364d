package testutil

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"

	"github.com/agentbox/agentbox/internal/sandbox/backendtest"
)

// KubeVersion is the Kubernetes release scripts/setup-k8s.sh builds (keep
// in step with it).
const KubeVersion = "v1.34.2"

// KubeDir is where scripts/setup-k8s.sh caches the cluster's binaries
// (kube-apiserver, kubelet, kubectl, ...) with ".complete" once all are in
// place.
func KubeDir() string {
	root := os.Getenv("AGENTBOX_CACHE")
	if root == "" {
		root = "/var/cache/agentbox"
	}
	return filepath.Join(root, "k8s", KubeVersion)
}

var kube struct {
	once       sync.Once
	kubeconfig string
	err        error
}

// KubeCluster brings up the single-node test cluster with
// scripts/k8s-cluster.sh (once per test binary; a cluster already up is
// reused, and it stays up for the next binary) and returns its admin
// kubeconfig. images are imported into the cluster's container runtime
// from dockerd on top of the script's defaults. It skips through
// backendtest.SkipOrFail, which fails under CI, when the binaries are not
// built or the cluster cannot start here.
func KubeCluster(t testing.TB, images ...string) string {
	t.Helper()
	if _, err := os.Stat(filepath.Join(KubeDir(), ".complete")); err != nil {
		backendtest.SkipOrFail(t, fmt.Sprintf("kubernetes %s is not built at %s: run scripts/setup-k8s.sh (scripts/setup.sh runs it)", KubeVersion, KubeDir()))
	}
	if os.Geteuid() != 0 {
		backendtest.SkipOrFail(t, "the test cluster's kubelet and containerd run as root")
	}
	kube.once.Do(func() {
		_, file, _, _ := runtime.Caller(0)
		script := filepath.Join(filepath.Dir(file), "..", "..", "scripts", "k8s-cluster.sh")
		cmd := exec.Command(script, "up")
		cmd.Env = os.Environ()
		if len(images) > 0 {
			cmd.Env = append(cmd.Env, "AGENTBOX_K8S_IMAGES=agentbox/busybox:latest agentbox/debian:bookworm "+strings.Join(images, " "))
		}
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		if err := cmd.Run(); err != nil {
			kube.err = fmt.Errorf("%s up: %v\n%s", script, err, stderr.String())
			return
		}
		kube.kubeconfig = strings.TrimSpace(stdout.String())
	})
	if kube.err != nil {
		t.Fatalf("the test cluster: %v", kube.err)
	}
	return kube.kubeconfig
}

// Kubectl runs the test cluster's kubectl with its admin kubeconfig.
func Kubectl(kubeconfig string, args ...string) ([]byte, error) {
	cmd := exec.Command(filepath.Join(KubeDir(), "kubectl"), append([]string{"--kubeconfig", kubeconfig}, args...)...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return out, fmt.Errorf("kubectl %s: %v: %s", strings.Join(args, " "), err, bytes.TrimSpace(out))
	}
	return out, nil
}
