package api_test

import (
	"bufio"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentbox/agentbox/client"
	"github.com/agentbox/agentbox/internal/api"
	"github.com/agentbox/agentbox/internal/manager"
	"github.com/agentbox/agentbox/internal/store"
	"github.com/agentbox/agentbox/internal/store/sqlstore"
	"github.com/agentbox/agentbox/internal/testutil"
)

// follower collects what one event stream delivers.
type follower struct {
	mu     sync.Mutex
	events []client.Event
	cancel context.CancelFunc
	done   chan error
}

func follow(t *testing.T, cl *client.Client, f client.EventFilter) *follower {
	ctx, cancel := context.WithCancel(context.Background())
	fl := &follower{cancel: cancel, done: make(chan error, 1)}
	go func() {
		fl.done <- cl.FollowEvents(ctx, f, func(e client.Event) error {
			fl.mu.Lock()
			fl.events = append(fl.events, e)
			fl.mu.Unlock()
			return nil
		})
	}()
	t.Cleanup(func() {
		cancel()
		<-fl.done
	})
	return fl
}

// waitFor polls until the follower holds an event ok accepts.
func (fl *follower) waitFor(t *testing.T, what string, ok func(client.Event) bool) client.Event {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		fl.mu.Lock()
		for _, e := range fl.events {
			if ok(e) {
				fl.mu.Unlock()
				return e
			}
		}
		fl.mu.Unlock()
		if time.Now().After(deadline) {
			t.Fatalf("no %s event within 10s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func (fl *follower) snapshot() []client.Event {
	fl.mu.Lock()
	defer fl.mu.Unlock()
	return append([]client.Event(nil), fl.events...)
}

func waitNoStreams(t *testing.T) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for api.OpenEventStreams() != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("%d event streams still served after their clients left", api.OpenEventStreams())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestFollowEvents: a stream delivers the events logged before it and
// those written after it started, keeps to its filters, misses none under
// concurrent appends, and ends when its client leaves.
func TestFollowEvents(t *testing.T) {
	f := newFixture(t, "")
	ctx := t.Context()
	src := testutil.NewRepo(t, map[string]string{"a.txt": "a\n"})
	r, err := f.cl.AddRepo(ctx, "file://"+src.Dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	wa, err := f.cl.CreateWorkspace(ctx, client.CreateWorkspace{Repo: r.ID, Task: "a"})
	if err != nil {
		t.Fatal(err)
	}
	wb, err := f.cl.CreateWorkspace(ctx, client.CreateWorkspace{Repo: r.ID, Task: "b"})
	if err != nil {
		t.Fatal(err)
	}

	byWS := follow(t, f.cl, client.EventFilter{Workspace: wa.ID})
	byType := follow(t, f.cl, client.EventFilter{Type: "file.written"})
	// Logged before the stream: delivered first.
	byWS.waitFor(t, "workspace.created", func(e client.Event) bool { return e.Type == "workspace.created" })

	// Written after the stream started: delivered.
	write := func(ws, p string) {
		if _, err := f.cl.WriteFile(ctx, ws, p, strings.NewReader("x"), 0, false); err != nil {
			t.Fatal(err)
		}
	}
	write(wb.ID, "b.txt")
	write(wa.ID, "a2.txt")
	got := byWS.waitFor(t, "file.written", func(e client.Event) bool { return e.Type == "file.written" })
	if got.WorkspaceID != wa.ID || !strings.Contains(got.Detail, `"path":"a2.txt"`) || !strings.Contains(got.Detail, `"request_id":"req_`) || got.Actor != "api" {
		t.Errorf("followed event = %+v", got)
	}
	byType.waitFor(t, "file.written of b", func(e client.Event) bool { return e.WorkspaceID == wb.ID })
	byType.waitFor(t, "file.written of a", func(e client.Event) bool { return e.WorkspaceID == wa.ID })
	for _, e := range byWS.snapshot() {
		if e.WorkspaceID != wa.ID {
			t.Errorf("workspace filter let through %+v", e)
		}
	}
	for _, e := range byType.snapshot() {
		if e.Type != "file.written" {
			t.Errorf("type filter let through %+v", e)
		}
	}

	// Under a stream of appends, a follower started in the middle of it
	// gets every event, in order, once.
	const n = 150
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := range n {
			f.m.FileChanged(context.Background(), wb.ID, "written", "burst/"+string(rune('a'+i%26)))
		}
	}()
	mid := follow(t, f.cl, client.EventFilter{Workspace: wb.ID, Type: "file.written"})
	wg.Wait()
	all, err := f.cl.Events(ctx, client.EventFilter{Workspace: wb.ID, Type: "file.written", Limit: 10000})
	if err != nil {
		t.Fatal(err)
	}
	last := all[len(all)-1].ID
	mid.waitFor(t, "the last of the burst", func(e client.Event) bool { return e.ID == last })
	seen := mid.snapshot()
	if len(seen) != len(all) {
		t.Fatalf("follower got %d events, the log has %d", len(seen), len(all))
	}
	for i := range all {
		if seen[i].ID != all[i].ID {
			t.Fatalf("event %d: follower got ID %d, the log has %d", i, seen[i].ID, all[i].ID)
		}
	}

	// Every stream ends on the server when its client goes away.
	for _, fl := range []*follower{byWS, byType, mid} {
		fl.cancel()
		if err := <-fl.done; err != nil {
			t.Errorf("follow after cancel: %v", err)
		}
		fl.done <- nil // for the cleanup
	}
	waitNoStreams(t)
}

// TestFollowEventsSSEAndShutdown: the stream speaks SSE when asked, and
// a server shutdown ends it.
func TestFollowEventsSSEAndShutdown(t *testing.T) {
	data := t.TempDir()
	st, err := sqlstore.Open(t.Context(), filepath.Join(data, "agentbox.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	m, err := manager.New(t.Context(), st, manager.Config{DataDir: data, UID: -1, GID: -1})
	if err != nil {
		t.Fatal(err)
	}
	s := api.New(m, api.Options{})
	srv := httptest.NewServer(s)
	defer srv.Close()
	if _, err := st.AppendEvent(t.Context(), store.Event{Actor: "test", Type: "test.one"}); err != nil {
		t.Fatal(err)
	}

	req, _ := http.NewRequestWithContext(t.Context(), "GET", srv.URL+"/v1/events?follow=true&type=test.one", nil)
	req.Header.Set("Accept", "text/event-stream")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Errorf("content type %q", ct)
	}
	br := bufio.NewReader(resp.Body)
	var lines []string
	for len(lines) < 3 {
		l, err := br.ReadString('\n')
		if err != nil {
			t.Fatalf("reading the stream: %v (so far %q)", err, lines)
		}
		lines = append(lines, strings.TrimSuffix(l, "\n"))
	}
	if lines[0] != "id: 1" || lines[1] != "event: event" || !strings.HasPrefix(lines[2], "data: {") || !strings.Contains(lines[2], `"test.one"`) {
		t.Errorf("SSE event = %q", lines)
	}

	cl, _ := client.New(srv.URL, "")
	done := make(chan error, 1)
	go func() {
		done <- cl.FollowEvents(context.Background(), client.EventFilter{}, func(client.Event) error { return nil })
	}()
	deadline := time.Now().Add(10 * time.Second)
	for api.OpenEventStreams() < 2 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	s.Shutdown()
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), "ended") {
			t.Errorf("follow after shutdown = %v, want the stream ended", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a shutdown did not end the stream")
	}
	// The SSE stream ends too.
	ended := make(chan struct{})
	go func() {
		io.Copy(io.Discard, br)
		close(ended)
	}()
	select {
	case <-ended:
	case <-time.After(10 * time.Second):
		t.Error("the SSE stream is still open after shutdown")
	}
	resp.Body.Close()
	waitNoStreams(t)
}
