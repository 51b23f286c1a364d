package manager

import (
	"os"
	"regexp"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// injectedSteps are the failure points of manager.go, by operation.
// TestInjectedStepsCoverManager keeps it in step with the code.
var injectedSteps = []struct{ op, step string }{
	{"create", "row"},
	{"create", "dir"},
	{"create", "files"},
	{"create", "hostgit"},
	{"create", "ready"},
	{"fork", "fork-files"},
	{"fork", "fork-ready"},
}

// TestInjectedStepsCoverManager fails when manager.go gains a failure
// point that testFailureInjection does not exercise, or loses one.
func TestInjectedStepsCoverManager(t *testing.T) {
	var src []byte
	for _, f := range []string{"manager.go", "recover.go"} {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		src = append(src, b...)
	}
	var inCode []string
	for _, m := range regexp.MustCompile(`m\.step\("([^"]+)"\)`).FindAllSubmatch(src, -1) {
		inCode = append(inCode, string(m[1]))
	}
	var inTest []string
	for _, s := range injectedSteps {
		inTest = append(inTest, s.step)
	}
	slices.Sort(inCode)
	slices.Sort(inTest)
	if diff := cmp.Diff(inCode, inTest); diff != "" {
		t.Errorf("failure points in manager.go (-code +test):\n%s", diff)
	}
}
