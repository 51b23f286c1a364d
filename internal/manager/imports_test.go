package manager

import (
	"os/exec"
	"strings"
	"testing"
)

// TestNoTransportImports keeps the lifecycle core free of HTTP, Docker and
// Kubernetes: those belong to the API layer and to backends (STYLE.md).
func TestNoTransportImports(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", ".").Output()
	if err != nil {
		t.Fatal(err)
	}
	for _, dep := range strings.Fields(string(out)) {
		for _, banned := range []string{"net/http", "github.com/moby/", "github.com/docker/", "k8s.io/"} {
			if dep == banned || strings.HasPrefix(dep, banned) {
				t.Errorf("internal/manager depends on %s", dep)
			}
		}
	}
}
