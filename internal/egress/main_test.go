package egress

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package if any test leaves a goroutine behind: every
// tunnel, transport and upstream a test starts must be gone when it ends.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
