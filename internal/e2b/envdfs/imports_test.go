package envdfs

import (
	"os/exec"
	"strings"
	"testing"

	"github.com/agentbox/agentbox/internal/sandbox"
)

// TestImports keeps the package an adapter over the manager: it never
// reaches a sandbox backend, the store or the guest directly (STYLE.md,
// "Surfaces are adapters").
func TestImports(t *testing.T) {
	out, err := exec.Command("go", "list", "-f", `{{join .Imports "\n"}}`, ".").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	for _, imp := range strings.Fields(string(out)) {
		for _, banned := range []string{"internal/backend", "internal/store", "internal/guest", "internal/sandbox"} {
			if strings.Contains(imp, "github.com/agentbox/agentbox/"+banned) {
				t.Errorf("envdfs imports %s", imp)
			}
		}
	}
}

// TestSandboxConstants pins the copy of sandbox.WorkspaceDir.
func TestSandboxConstants(t *testing.T) {
	if workspaceDir != sandbox.WorkspaceDir {
		t.Errorf("workspaceDir %q, package sandbox says %q", workspaceDir, sandbox.WorkspaceDir)
	}
}
