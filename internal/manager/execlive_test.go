package manager

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/agentbox/agentbox/internal/store"
)

// TestExecTableBudget: at most maxExecRings execs hold rings; one that
// starts when running ones hold them all keeps none, an ended one gives
// its up to a new one, and ended ones are forgotten past maxEndedExecs.
func TestExecTableBudget(t *testing.T) {
	var tab execTable
	rec := func(i int) store.Exec {
		return store.Exec{ID: fmt.Sprintf("ex_%d", i), WorkspaceID: "ws_1", StartedAt: time.Unix(int64(i), 0)}
	}
	var es []*liveExec
	for i := range maxExecRings + 1 {
		es = append(es, tab.begin(rec(i), []string{"true"}))
	}
	if es[maxExecRings-1].out[0] == nil {
		t.Fatalf("exec %d of %d has no ring", maxExecRings, maxExecRings)
	}
	over := es[maxExecRings]
	if over.out[0] != nil || over.view().RingBytes != 0 {
		t.Fatalf("exec past the budget has a ring")
	}
	// Its output still reaches the caller.
	var got bytes.Buffer
	w, _ := over.teeOutput(&got, nil)
	w.Write([]byte("hi"))
	if got.String() != "hi" {
		t.Fatalf("caller got %q", got.String())
	}
	tab.end(es[0], store.Exec{State: store.ExecExited})
	next := tab.begin(rec(1000), []string{"true"})
	if next.out[0] == nil {
		t.Fatalf("a new exec did not take the ring an ended one gave up")
	}
	if _, ok := tab.byID[es[0].id]; ok {
		t.Fatalf("the ended exec whose ring was taken is still held")
	}
	if tab.rings != maxExecRings {
		t.Fatalf("rings = %d, want %d", tab.rings, maxExecRings)
	}
	for _, e := range es[1:] {
		tab.end(e, store.Exec{State: store.ExecExited})
	}
	if len(tab.ended) != maxEndedExecs || len(tab.byID) != maxEndedExecs+1 {
		t.Fatalf("ended %d, held %d; want %d ended and one running", len(tab.ended), len(tab.byID), maxEndedExecs)
	}
	if tab.rings > maxEndedExecs+1 {
		t.Fatalf("rings = %d after the ended ones were forgotten", tab.rings)
	}
}

// TestExecTee: the caller and the ring both get every byte; the caller's
// error is the writer's; a follower waiting on the ring wakes.
func TestExecTee(t *testing.T) {
	var tab execTable
	e := tab.begin(store.Exec{ID: "ex_1", WorkspaceID: "ws_1"}, []string{"sh"})
	var caller bytes.Buffer
	out, _ := e.teeOutput(&caller, nil)
	woke := make(chan error, 1)
	go func() { woke <- e.out[0].wait(context.Background(), 0) }()
	out.Write([]byte("first\n"))
	if err := <-woke; err != nil {
		t.Fatal(err)
	}
	out.Write([]byte("second\n"))
	data, _, _ := e.out[0].read(0, 100)
	if string(data) != "first\nsecond\n" || caller.String() != "first\nsecond\n" {
		t.Fatalf("ring %q, caller %q", data, caller.String())
	}
	bad := errors.New("gone")
	out, _ = e.teeOutput(failWriter{bad}, nil)
	if _, err := out.Write([]byte("x")); !errors.Is(err, bad) {
		t.Fatalf("tee's error = %v, want the caller's", err)
	}
}

type failWriter struct{ err error }

func (f failWriter) Write([]byte) (int, error) { return 0, f.err }

// BenchmarkExecTee is the tee's cost per chunk of output, nobody
// following: one copy into the ring, no allocation once it is grown.
func BenchmarkExecTee(b *testing.B) {
	var tab execTable
	e := tab.begin(store.Exec{ID: "ex_1", WorkspaceID: "ws_1"}, []string{"sh"})
	out, _ := e.teeOutput(discard{}, nil)
	p := make([]byte, 4096)
	b.ReportAllocs()
	b.SetBytes(int64(len(p)))
	for b.Loop() {
		out.Write(p)
	}
}

type discard struct{}

func (discard) Write(p []byte) (int, error) { return len(p), nil }

// BenchmarkExecTableBeginEnd is what the live output adds to every exec
// besides its output: the record in the table, its rings (empty until
// output comes), and their end.
func BenchmarkExecTableBeginEnd(b *testing.B) {
	var tab execTable
	argv := []string{"true"}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		i++
		e := tab.begin(store.Exec{ID: fmt.Sprint("ex_", i), WorkspaceID: "ws_1"}, argv)
		tab.end(e, store.Exec{State: store.ExecExited})
	}
}
