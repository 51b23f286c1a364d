package sandbox

import (
	"errors"
	"os/exec"
	"strings"
	"testing"

	"github.com/agentbox/agentbox/internal/errdefs"
)

func TestSpecValidate(t *testing.T) {
	ok := Spec{Backend: "docker", Image: "agentbox/busybox:latest"}.WithDefaults()
	if err := ok.Validate(); err != nil {
		t.Fatal(err)
	}
	edge := ok
	edge.Limits.Pids, edge.Limits.TmpBytes = MinPids, edge.Limits.MemoryBytes
	if err := edge.Validate(); err != nil {
		t.Errorf("the lowest pids and the largest /tmp: %v", err)
	}
	bad := map[string]func(*Spec){
		"no image":     func(s *Spec) { s.Image = "" },
		"zero cpus":    func(s *Spec) { s.Limits.CPUs = 0.001 },
		"absurd cpus":  func(s *Spec) { s.Limits.CPUs = 1e6 },
		"tiny memory":  func(s *Spec) { s.Limits.MemoryBytes = 1024 },
		"no pids":      func(s *Spec) { s.Limits.Pids = 1 },
		"too few pids": func(s *Spec) { s.Limits.Pids = MinPids - 1 },
		"tiny tmp":     func(s *Spec) { s.Limits.TmpBytes = 10 },
		"tmp over mem": func(s *Spec) { s.Limits.TmpBytes = s.Limits.MemoryBytes + 1 },
		"neg lifetime": func(s *Spec) { s.Lifetime = -1 },
	}
	for name, mutate := range bad {
		t.Run(name, func(t *testing.T) {
			s := ok
			mutate(&s)
			if err := s.Validate(); !errors.Is(err, errdefs.ErrInvalid) {
				t.Errorf("Validate = %v, want ErrInvalid", err)
			}
		})
	}
}

// TestNoBackendImports keeps the domain free of engines and transports:
// backends import this package, never the other way (STYLE.md).
func TestNoBackendImports(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", ".").Output()
	if err != nil {
		t.Fatal(err)
	}
	for _, dep := range strings.Fields(string(out)) {
		for _, banned := range []string{"net/http", "github.com/moby/", "github.com/docker/", "k8s.io/", "github.com/agentbox/agentbox/internal/backend"} {
			if strings.HasPrefix(dep, banned) {
				t.Errorf("internal/sandbox depends on %s", dep)
			}
		}
	}
}
