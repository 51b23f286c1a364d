package initd

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/agentbox/agentbox/internal/guest"
)

func TestParsePorts(t *testing.T) {
	got, err := ParsePorts(" 3128, 80,,3128 ")
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]uint16{80, 3128}, got); diff != "" {
		t.Errorf("ports (-want +got):\n%s", diff)
	}
	for _, bad := range []string{"0", "65536", "http", "-1"} {
		if _, err := ParsePorts(bad); err == nil {
			t.Errorf("ParsePorts(%q) accepted", bad)
		}
	}
}

func TestReaperArgs(t *testing.T) {
	for _, l := range []Landlock{
		{},
		{Mode: guest.LandlockBestEffort},
		{Mode: guest.LandlockRequired, ConnectTCP: []uint16{80, 3128}},
	} {
		got, err := parseReaperArgs(l.reaperArgs())
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(l, got, cmp.Comparer(func(a, b []uint16) bool { return len(a) == len(b) && (len(a) == 0 || cmp.Equal(a, b)) })); diff != "" {
			t.Errorf("round trip (-want +got):\n%s", diff)
		}
	}
	if _, err := parseReaperArgs([]string{"landlock=sometimes"}); err == nil {
		t.Error("a bad mode was accepted")
	}
	if _, err := parseReaperArgs([]string{"nonsense"}); err == nil {
		t.Error("an unknown argument was accepted")
	}
}
