// Package skip is the one way a test of agentbox skips: OrFail skips with
// the reason on a machine that lacks what the test needs (root, an engine,
// a kernel feature), and fails instead where AGENTBOX_REQUIRE_SETUP=1 says
// the machine was set up for the whole suite (CI: scripts/test.sh), so
// that a broken environment cannot pass as a green run.
//
// It imports nothing of agentbox, so that every package's tests, internal
// or external, can use it without an import cycle. A test in this package
// fails when any other test calls t.Skip, t.Skipf or t.SkipNow directly.
package skip

import (
	"os"
	"testing"
)

// RequireSetupEnv, when "1", turns skips for a missing engine, runtime,
// privilege or kernel feature into failures. CI sets it.
const RequireSetupEnv = "AGENTBOX_REQUIRE_SETUP"

// Required reports whether AGENTBOX_REQUIRE_SETUP=1: the machine was set up
// for the whole suite, and whatever a test needs must be there.
func Required() bool { return os.Getenv(RequireSetupEnv) == "1" }

// OrFail skips t with reason, or fails it under AGENTBOX_REQUIRE_SETUP=1.
func OrFail(t testing.TB, reason string) {
	t.Helper()
	if Required() {
		t.Fatalf("%s=1 but %s", RequireSetupEnv, reason)
	}
	t.Skip(reason)
}
