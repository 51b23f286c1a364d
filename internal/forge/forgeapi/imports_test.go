package forgeapi

import (
	"os/exec"
	"strings"
	"testing"
)

// TestNoHTTP keeps this package usable from internal/manager, which must
// not depend on net/http (its own imports test).
func TestNoHTTP(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", ".").Output()
	if err != nil {
		t.Fatal(err)
	}
	for _, dep := range strings.Fields(string(out)) {
		if dep == "net/http" || strings.HasPrefix(dep, "net/http/") {
			t.Errorf("forgeapi depends on %s", dep)
		}
	}
}
