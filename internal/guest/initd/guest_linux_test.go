package initd

import "testing"

// TestKeepsOrphans: only where reapers are subreapers on Linux does the
// guest skip its scan of the process table after each command.
func TestKeepsOrphans(t *testing.T) {
	const linux = "#1 SMP PREEMPT_DYNAMIC Debian 6.1.158-1 (2025-11-09)"
	for _, c := range []struct {
		env, version string
		want         bool
	}{
		{"", linux, true},
		{"1", linux, true},
		{"0", linux, false},         // reapers are not subreapers
		{"", gvisorVersion, false},  // gVisor 2022 ignored them
		{"0", gvisorVersion, false}, // the gvisor backend
	} {
		if got := keepsOrphans(c.env, c.version); got != c.want {
			t.Errorf("keepsOrphans(%q, %q) = %v, want %v", c.env, c.version, got, c.want)
		}
	}
}
