package local

import (
	"context"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/agentbox/agentbox/internal/sandbox"
)

// TestGuestUserMaps: with a guest user of its own, the jail's user
// namespace holds that user and the sandbox user, each mapped to itself,
// and nothing else (no root); the guest runs as the first, bubblewrap
// having granted it the capabilities it keeps.
func TestGuestUserMaps(t *testing.T) {
	t.Parallel()
	b := newBackend(t)
	const guestUID, guestGID = 65533, 65534
	req, ln := boxRequest(t, sandbox.Spec{})
	req.GuestUID, req.GuestGID = guestUID, guestGID
	info, err := b.Create(t.Context(), req)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Remove(context.Background(), info.Ref)
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	c, err := ln.Accept(ctx)
	if err != nil {
		t.Fatalf("the guest did not connect: %v\n%s", err, b.GuestLog(req.ID))
	}
	defer c.Close()
	rec, err := b.lookup(req.ID)
	if err != nil {
		t.Fatal(err)
	}
	read := func(name string) string {
		data, err := os.ReadFile("/proc/" + strconv.Itoa(rec.Pid) + "/" + name)
		if err != nil {
			t.Fatal(err)
		}
		return strings.Join(strings.Fields(string(data)), " ")
	}
	if got, want := read("uid_map"), "1000 1000 1 65533 65533 1"; got != want {
		t.Errorf("uid_map %q, want %q", got, want)
	}
	if got, want := read("gid_map"), "1000 1000 1 65534 65534 1"; got != want {
		t.Errorf("gid_map %q, want %q", got, want)
	}
	status := read("status")
	for _, want := range []string{"Uid: 65533 65533 65533 65533", "Gid: 65534 65534 65534 65534", "CapEff: 00000000000000e0", "CapBnd: 0000000000000000", "CapAmb: 0000000000000000"} {
		if !strings.Contains(status, want) {
			t.Errorf("the guest's status lacks %q: %s", want, status)
		}
	}
	if info.State != sandbox.StateRunning {
		t.Errorf("state %s", info.State)
	}
}
