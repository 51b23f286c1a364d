package kubernetes

import (
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/agentbox/agentbox/internal/testutil"
)

// TestDeployManifests has the test cluster's API server validate
// deploy/kubernetes/agentbox.yaml (a server-side dry run: schemas,
// admission, references), so the manifests cannot rot unseen. Running
// agentbox from them needs an image of agentbox, which nothing here
// builds.
func TestDeployManifests(t *testing.T) {
	kubeconfig := testutil.KubeCluster(t)
	_, file, _, _ := runtime.Caller(0)
	manifest := filepath.Join(filepath.Dir(file), "..", "..", "..", "deploy", "kubernetes", "agentbox.yaml")
	// A dry run makes nothing, so the namespaced objects need their
	// namespaces for real.
	for _, ns := range []string{"agentbox-system", "agentbox"} {
		if _, err := testutil.Kubectl(kubeconfig, "get", "namespace", ns); err != nil {
			if out, err := testutil.Kubectl(kubeconfig, "create", "namespace", ns); err != nil {
				t.Fatalf("%v %s", err, out)
			}
			t.Cleanup(func() { testutil.Kubectl(kubeconfig, "delete", "namespace", ns, "--wait=false") })
		}
	}
	out, err := testutil.Kubectl(kubeconfig, "apply", "--dry-run=server", "-f", manifest)
	if err != nil {
		t.Fatalf("%v", err)
	}
	for _, want := range []string{"namespace/agentbox-system", "serviceaccount/agentbox", "role.rbac.authorization.k8s.io/agentbox-sandboxes", "daemonset.apps/agentbox"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("the dry run does not name %s:\n%s", want, out)
		}
	}
}
