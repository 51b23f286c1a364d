package initd

import "testing"

// TestKeepsOrphans: only where reapers are subreapers on Linux does the
// guest skip its scan of the process table after each command.
func TestKeepsOrphans(t *testing.T) {
	const linux = "#1 SMP PREEMPT_DYNAMIC Debian 6.1.158-1 (2025-11-09)"
	for _, c := range []struct {
		subreapers bool
		version    string
		want       bool
	}{
		{true, linux, true},
		{false, linux, false},         // reapers are not subreapers
		{true, gvisorVersion, false},  // gVisor 2022 ignored them
		{false, gvisorVersion, false}, // the gvisor backend
	} {
		if got := keepsOrphans(c.subreapers, c.version); got != c.want {
			t.Errorf("keepsOrphans(%v, %q) = %v, want %v", c.subreapers, c.version, got, c.want)
		}
	}
}
