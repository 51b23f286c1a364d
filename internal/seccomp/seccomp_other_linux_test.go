//go:build !amd64 && !arm64

package seccomp

import "testing"

// TestBuildUnsupportedArchitecture: where agentbox has no filter, Build
// refuses rather than give a sandbox none (the filter tests run on amd64
// and arm64 only).
func TestBuildUnsupportedArchitecture(t *testing.T) {
	if f, err := Build(Options{}); err == nil {
		t.Errorf("Build = %d instructions, want an error on this architecture", len(f))
	}
}
