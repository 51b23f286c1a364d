package guest

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"go.uber.org/goleak"
)

// guestBin is the agentbox-guest binary built for the tests that run it.
var guestBin string

// keepGuestEnv names a path to build the guest binary at instead of a
// temporary directory (its directory must be reachable by uid 1000).
// With prebuiltGuestEnv=1 the binary there is used as it is: to compare
// builds in benchmarks.
const (
	keepGuestEnv     = "AGENTBOX_TEST_GUEST_BIN"
	prebuiltGuestEnv = "AGENTBOX_TEST_GUEST_PREBUILT"
)

// canaryEnv is set in this test process: the guest inherits it, and no
// command may ever see it.
const canaryEnv = "AGENTBOX_TEST_CANARY_SECRET"

var canaryValue = fmt.Sprintf("canary-%d", os.Getpid())

func TestMain(m *testing.M) {
	os.Exit(runTests(m))
}

func runTests(m *testing.M) int {
	dir, err := os.MkdirTemp("", "agentbox-guest-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	// World-traversable: containers bind-mount the binary and run it as
	// an unprivileged user.
	os.Chmod(dir, 0o755)
	guestBin = filepath.Join(dir, "agentbox-guest")
	if p := os.Getenv(keepGuestEnv); p != "" {
		// A binary that outlives the run, for profilers that resolve
		// symbols afterwards (perf report).
		guestBin = p
	}
	if os.Getenv(prebuiltGuestEnv) != "1" {
		build := exec.Command("go", "build", "-trimpath", "-o", guestBin, "github.com/agentbox/agentbox/cmd/agentbox-guest")
		build.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := build.CombinedOutput(); err != nil {
			fmt.Fprintf(os.Stderr, "building agentbox-guest: %v\n%s", err, out)
			return 1
		}
	}
	os.Setenv(canaryEnv, canaryValue)
	code := m.Run()
	// Every connection, command and listener a test made is closed by
	// now: none of their goroutines may be left.
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintf(os.Stderr, "leaked goroutines: %v\n", err)
			return 1
		}
	}
	return code
}
