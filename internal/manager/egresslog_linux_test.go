package manager

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"testing"

	"github.com/agentbox/agentbox/internal/store"
	"github.com/agentbox/agentbox/internal/workspace"
)

// Decisions reported at once from many goroutines are all in the event
// log, each with its bytes and duration, once FlushEgress returns; a
// sandbox's decisions come in the order they were reported.
func TestEgressLogRecordsEveryDecision(t *testing.T) {
	h := newHarness(t, workspace.Overlay)
	const senders, each = 8, 100
	var wg sync.WaitGroup
	for s := range senders {
		wg.Go(func() {
			for i := range each {
				h.m.RecordEgress(EgressDecision{
					SandboxID: fmt.Sprintf("sb_egress%d", s), Method: "CONNECT", Host: "allowed.test", Port: 443,
					Allowed: i%2 == 0, Reason: "test", BytesUp: int64(i), BytesDown: int64(i % 2), Duration: 1500000,
				})
			}
		})
	}
	wg.Wait()
	h.m.FlushEgress()
	for s := range senders {
		evs, err := h.m.Events(context.Background(), store.EventFilter{SandboxID: fmt.Sprintf("sb_egress%d", s)})
		if err != nil {
			t.Fatal(err)
		}
		if len(evs) != each {
			t.Fatalf("sandbox %d: %d events, want %d", s, len(evs), each)
		}
		for i, ev := range evs {
			var d struct {
				BytesUp    int64 `json:"bytes_up"`
				DurationMS int64 `json:"duration_ms"`
			}
			if err := json.Unmarshal([]byte(ev.Detail), &d); err != nil {
				t.Fatal(err)
			}
			want := map[bool]string{true: "egress.allowed", false: "egress.denied"}[i%2 == 0]
			if ev.Type != want || d.BytesUp != int64(i) || d.DurationMS != 1 {
				t.Errorf("sandbox %d, event %d: %s %s, want %s with bytes_up %d, duration_ms 1", s, i, ev.Type, ev.Detail, want, i)
			}
		}
	}
}

// A dial of the daemon's own (a host-side fetch for a dependency) is in
// the event log as the daemon's, naming whom it dialed for, beside the
// sandboxes' decisions, and meters nothing.
func TestEgressLogRecordsDaemonDials(t *testing.T) {
	h := newHarness(t, workspace.Overlay)
	h.m.RecordEgress(EgressDecision{SandboxID: "dependencies", Daemon: true, Method: "DIAL", Host: "registry.test", Port: 443, Allowed: true, Reason: "allowed"})
	h.m.RecordEgress(EgressDecision{SandboxID: "dependencies", Daemon: true, Method: "DIAL", Host: "evil.test", Port: 443, Reason: "host not in allowlist"})
	h.m.FlushEgress()
	evs, err := h.m.Events(context.Background(), store.EventFilter{})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, ev := range evs {
		if ev.Type != "egress.allowed" && ev.Type != "egress.denied" {
			continue
		}
		var d struct{ For, Host, Reason string }
		if err := json.Unmarshal([]byte(ev.Detail), &d); err != nil {
			t.Fatal(err)
		}
		got = append(got, fmt.Sprintf("%s %s sandbox=%q for=%s host=%s reason=%s", ev.Actor, ev.Type, ev.SandboxID, d.For, d.Host, d.Reason))
	}
	want := []string{
		`daemon egress.allowed sandbox="" for=dependencies host=registry.test reason=allowed`,
		`daemon egress.denied sandbox="" for=dependencies host=evil.test reason=host not in allowlist`,
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("events:\n%q\nwant\n%q", got, want)
	}
}
