package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentbox/agentbox/internal/testutil"
)

// TestKubernetesThroughTheCLI is issue 16's acceptance on the test cluster:
// `sandbox create --backend kubernetes` makes a pod, exec runs in it, a
// write to the workspace lands on the host, the pod deleted behind
// agentbox's back is replaced on the next exec (replaced: true) with the
// workspace's files intact, and removing the workspace leaves no pod.
func TestKubernetesThroughTheCLI(t *testing.T) {
	kubeconfig := testutil.KubeCluster(t)
	data := t.TempDir()
	ns := fmt.Sprintf("abcli-%x", time.Now().UnixNano()&0xffffff)
	cfg := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(cfg, []byte(fmt.Sprintf("kubernetes:\n  kubeconfig: %s\n  namespace: %s\n  runtime_classes: [runc]\n", kubeconfig, ns)), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { testutil.Kubectl(kubeconfig, "delete", "namespace", ns, "--wait=false") })
	src := testutil.NewRepo(t, map[string]string{"hello.txt": "hello from the repo\n"})
	d := startDaemon(t, data, "--config", cfg)
	defer d.stop(t)
	cleanupAll(t, data, "--config", cfg)

	out, errOut, code := runCLI(t, data, "", "--json", "ws", "create", "--repo", src.Dir)
	if code != 0 {
		t.Fatalf("ws create: %s %s", out, errOut)
	}
	ws := oneJSON(t, out)["id"].(string)
	out, errOut, code = runCLI(t, data, "", "--json", "sandbox", "create", "--ws", ws, "--backend", "kubernetes", "--image", "agentbox/busybox:latest", "--memory", "256M", "--pids", "128")
	if code != 0 {
		t.Fatalf("sandbox create --backend kubernetes: %s %s", out, errOut)
	}
	sb := oneJSON(t, out)
	pod, _ := sb["backend_ref"].(string)
	if sb["state"] != "running" || sb["backend"] != "kubernetes" || !strings.HasPrefix(pod, "agentbox-") {
		t.Fatalf("sandbox = %v", sb)
	}
	// The pod is what the cluster says it is.
	if got, err := testutil.Kubectl(kubeconfig, "-n", ns, "get", "pod", pod, "-o", "jsonpath={.status.phase} {.spec.automountServiceAccountToken} {.spec.containers[0].securityContext.readOnlyRootFilesystem}"); err != nil || string(got) != "Running false true" {
		t.Errorf("pod %s: %q %v", pod, got, err)
	}
	out, errOut, code = runCLI(t, data, "", "exec", ws, "--env", "GREETING=hi", "--", "sh", "-c", "cat hello.txt; echo $GREETING; id -u; echo written > made-in-pod.txt; echo oops >&2; exit 3")
	if code != 3 || out != "hello from the repo\nhi\n1000\n" || errOut != "oops\n" {
		t.Errorf("exec: exit %d stdout %q stderr %q", code, out, errOut)
	}
	// Deleted behind the daemon's back (kubectl waits until the kubelet
	// has ended it); the next exec heals.
	if out, err := testutil.Kubectl(kubeconfig, "-n", ns, "delete", "pod", pod); err != nil {
		t.Fatalf("%v %s", err, out)
	}
	out, errOut, code = runCLI(t, data, "", "--json", "exec", ws, "--", "cat", "made-in-pod.txt")
	res, ok := oneJSON(t, out)["result"].(map[string]any)
	if !ok {
		t.Fatalf("exec after the pod's deletion: exit %d, no result: %s %s", code, out, errOut)
	}
	if code != 0 || res["replaced"] != true || res["sandbox_id"] == sb["id"] {
		t.Errorf("exec after the pod's deletion: exit %d %v %s", code, res, errOut)
	}
	if out, errOut, code = runCLI(t, data, "", "exec", ws, "--", "cat", "made-in-pod.txt"); code != 0 || out != "written\n" {
		t.Errorf("the workspace's write after the replacement: exit %d %q %q", code, out, errOut)
	}

	// A policy may pick a RuntimeClass the operator lists, and no other.
	pol := filepath.Join(t.TempDir(), "policy.yaml")
	os.WriteFile(pol, []byte("runtime_class: runc\n"), 0o600)
	ws2 := oneJSON(t, mustCLI(t, data, "--json", "ws", "create", "--repo", src.Dir))["id"].(string)
	out, errOut, code = runCLI(t, data, "", "--json", "sandbox", "create", "--ws", ws2, "--backend", "kubernetes", "--image", "agentbox/busybox:latest", "--policy", pol)
	if code != 0 {
		t.Fatalf("sandbox create with runtime_class runc: %s %s", out, errOut)
	}
	pod = oneJSON(t, out)["backend_ref"].(string)
	if got, err := testutil.Kubectl(kubeconfig, "-n", ns, "get", "pod", pod, "-o", "jsonpath={.spec.runtimeClassName}"); err != nil || string(got) != "runc" {
		t.Errorf("pod %s's RuntimeClass: %q %v", pod, got, err)
	}
	if out, errOut, code = runCLI(t, data, "", "exec", ws2, "--", "sh", "-c", "test -e /dev/termination-log && echo present || echo absent"); code != 0 || out != "absent\n" {
		t.Errorf("/dev/termination-log under RuntimeClass runc: exit %d %q %q", code, out, errOut)
	}
	os.WriteFile(pol, []byte("runtime_class: gvisor\n"), 0o600)
	ws3 := oneJSON(t, mustCLI(t, data, "--json", "ws", "create", "--repo", src.Dir))["id"].(string)
	if out, errOut, code = runCLI(t, data, "", "--json", "sandbox", "create", "--ws", ws3, "--backend", "kubernetes", "--image", "agentbox/busybox:latest", "--policy", pol); code == 0 || !strings.Contains(out+errOut, `runtime_class \"gvisor\" is not one this daemon allows`) {
		t.Errorf("sandbox create with a RuntimeClass the operator did not list: exit %d %s %s", code, out, errOut)
	}
	for _, w := range []string{ws2, ws3} {
		if out, errOut, code = runCLI(t, data, "", "ws", "rm", w); code != 0 {
			t.Fatalf("ws rm: %s %s", out, errOut)
		}
	}
	if out, errOut, code = runCLI(t, data, "", "ws", "rm", ws); code != 0 {
		t.Fatalf("ws rm: %s %s", out, errOut)
	}
	if got, err := testutil.Kubectl(kubeconfig, "-n", ns, "get", "pods", "-o", "name"); err != nil || strings.TrimSpace(string(got)) != "" {
		t.Errorf("pods left after the workspace's removal: %q %v", got, err)
	}
}
