package mitm

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package if a test leaves a goroutine behind: every
// relay, upstream and writer a test starts must be gone when it ends.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
