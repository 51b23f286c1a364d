package kubernetes

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/agentbox/agentbox/internal/hostbind"
	"github.com/agentbox/agentbox/internal/mountinfo"
	"github.com/agentbox/agentbox/internal/sandbox"
	"github.com/agentbox/agentbox/internal/sandbox/backendtest"
	"github.com/agentbox/agentbox/internal/testutil"
)

// testImage is the busybox image agentbox builds, imported into the test
// cluster's containerd by scripts/k8s-cluster.sh; nothing is pulled.
const testImage = "agentbox/busybox:latest"

var guestBin string

func TestMain(m *testing.M) { backendtest.MainWithGuest(m, &guestBin) }

// newBackend makes a backend on the test cluster in a namespace of the
// test's own, and fails the test if a workspace bind or a pod outlives it.
func newBackend(t *testing.T, runtimeClass string) *Backend {
	t.Helper()
	kubeconfig := testutil.KubeCluster(t)
	mountDir := filepath.Join(t.TempDir(), "binds")
	ns := "abtest-" + strings.ToLower(strings.ReplaceAll(fmt.Sprintf("%x", time.Now().UnixNano()), "_", ""))
	b, err := New(t.Context(), Options{Kubeconfig: kubeconfig, Namespace: ns, RequireNode: true, MountDir: mountDir, RuntimeClass: runtimeClass, StopTimeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx := context.Background()
		if left, _ := b.List(ctx, nil); len(left) != 0 {
			t.Errorf("pods left behind: %v", left)
			for _, i := range left {
				b.Remove(ctx, i.Ref)
			}
		}
		if left, _ := mountinfo.Under(mountDir); len(left) != 0 {
			t.Errorf("workspace binds left behind: %v", left)
			for _, p := range left {
				hostbind.UnmountAndRemove(p)
			}
		}
		b.c.CoreV1().Namespaces().Delete(ctx, ns, metav1.DeleteOptions{})
	})
	return b
}

func harness(runtimeClass string) backendtest.Harness {
	var b *Backend
	return backendtest.Harness{
		Image: testImage,
		Guest: guestBin,
		New: func(t *testing.T) sandbox.Backend {
			b = newBackend(t, runtimeClass)
			return b
		},
		// As an operator would: the pod deleted at once behind agentbox's
		// back.
		Kill: func(ctx context.Context, ref string) error {
			zero := int64(0)
			return b.c.CoreV1().Pods(b.ns).Delete(ctx, ref, metav1.DeleteOptions{GracePeriodSeconds: &zero})
		},
		Leftovers: func(ctx context.Context, id string) ([]string, error) {
			pods, err := b.c.CoreV1().Pods(b.ns).List(ctx, metav1.ListOptions{LabelSelector: sandbox.LabelSandbox + "=" + id})
			if err != nil {
				return nil, err
			}
			var left []string
			for _, p := range pods.Items {
				left = append(left, "pod "+p.Name)
			}
			if _, err := os.Stat(b.bindPath(id)); err == nil {
				left = append(left, "workspace bind directory "+b.bindPath(id))
			}
			return left, nil
		},
		// The pod's cgroup carries its UID.
		Markers: func(info sandbox.Info) []string {
			p, err := b.c.CoreV1().Pods(b.ns).Get(context.Background(), info.Ref, metav1.GetOptions{})
			if err != nil {
				return nil
			}
			return []string{string(p.UID)}
		},
		Logs: func(ctx context.Context, ref string) string {
			p, err := b.c.CoreV1().Pods(b.ns).Get(ctx, ref, metav1.GetOptions{})
			if err != nil {
				return err.Error()
			}
			logs, _ := filepath.Glob(filepath.Join("/var/log/pods", b.ns+"_"+ref+"_"+string(p.UID), "sandbox", "*.log"))
			var text string
			for _, l := range logs {
				data, _ := os.ReadFile(l)
				text += string(data)
			}
			return fmt.Sprintf("phase %s, statuses %+v\n%s", p.Status.Phase, p.Status.ContainerStatuses, text)
		},
	}
}

func TestKubernetes(t *testing.T) {
	t.Parallel()
	backendtest.Run(t, harness(""))
}
