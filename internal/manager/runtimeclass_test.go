package manager

import (
	"errors"
	"strings"
	"testing"

	"github.com/agentbox/agentbox/internal/errdefs"
	"github.com/agentbox/agentbox/internal/policy"
	"github.com/agentbox/agentbox/internal/sandbox"
)

// TestRuntimeClassOnlyOnKubernetes: a policy that asks for a RuntimeClass
// on a backend that has none is refused, not ignored: its caller must not
// believe it has a runtime it does not.
func TestRuntimeClassOnlyOnKubernetes(t *testing.T) {
	m := &Manager{}
	for _, b := range []string{"docker", "gvisor", "local"} {
		_, err := m.applyPolicy(sandbox.Spec{Backend: b, Policy: &policy.Policy{RuntimeClass: "gvisor"}})
		if !errors.Is(err, errdefs.ErrInvalid) || !strings.Contains(err.Error(), "only the kubernetes backend has runtime classes") {
			t.Errorf("%s: %v, want refused", b, err)
		}
	}
	if _, err := m.applyPolicy(sandbox.Spec{Backend: "kubernetes", Policy: &policy.Policy{RuntimeClass: "gvisor"}}); err != nil {
		t.Errorf("kubernetes: %v (the backend checks the class against the operator's list)", err)
	}
}
