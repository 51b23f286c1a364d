package api_test

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package if any test leaves a goroutine behind. Idle
// keep-alive connections of HTTP clients are not leaks of ours.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		// Idle connections (the docker client's among them) wait in a
		// read below readLoop, not at its top.
		goleak.IgnoreAnyFunction("net/http.(*persistConn).readLoop"),
		goleak.IgnoreAnyFunction("net/http.(*persistConn).writeLoop"),
	)
}
