package solve

import (
	"os/exec"
	"slices"
	"strings"
	"testing"

	"github.com/agentbox/agentbox/internal/telemetry"
)

// TestNoModelSDKs keeps the loop free of HTTP and the model SDKs: those
// are in package llm, which the daemon injects (solve.ProviderFunc).
func TestNoModelSDKs(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", ".").Output()
	if err != nil {
		t.Fatal(err)
	}
	for _, dep := range strings.Fields(string(out)) {
		for _, banned := range []string{"net/http", "github.com/openai/", "github.com/anthropics/"} {
			if dep == banned || strings.HasPrefix(dep, banned) {
				t.Errorf("internal/solve depends on %s", dep)
			}
		}
	}
}

// TestCategoriesInMetrics: /metrics lists every failure category.
func TestCategoriesInMetrics(t *testing.T) {
	if !slices.Equal(Categories, telemetry.SolveCategories) {
		t.Errorf("solve.Categories %v, telemetry.SolveCategories %v", Categories, telemetry.SolveCategories)
	}
}
