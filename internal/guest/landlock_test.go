package guest

import (
	"errors"
	"testing"
)

func TestParseLandlockMode(t *testing.T) {
	for _, tt := range []struct {
		in   string
		want LandlockMode
	}{
		{"", LandlockOff}, {"off", LandlockOff}, {"false", LandlockOff},
		{"true", LandlockBestEffort}, {"best-effort", LandlockBestEffort}, {"on", LandlockBestEffort},
		{"required", LandlockRequired}, {" Required ", LandlockRequired},
	} {
		got, err := ParseLandlockMode(tt.in)
		if err != nil || got != tt.want {
			t.Errorf("ParseLandlockMode(%q) = %v, %v; want %v", tt.in, got, err, tt.want)
		}
		if again, err := ParseLandlockMode(got.String()); err != nil || again != got {
			t.Errorf("%v does not survive String: %v %v", got, again, err)
		}
	}
	if _, err := ParseLandlockMode("maybe"); !errors.Is(err, ErrInvalid) {
		t.Errorf("ParseLandlockMode(maybe): %v, want ErrInvalid", err)
	}
}
