//go:build !linux

package doctor

import "testing"

func TestRunUnsupportedPlatform(t *testing.T) {
	r := Run(t.Context(), Options{})
	if r.OK || len(r.Checks) != 1 || r.Checks[0].Name != "platform" || r.Checks[0].Status != StatusMissing {
		t.Errorf("Run on an unsupported platform = %+v, want one missing platform check and OK false", r)
	}
}
