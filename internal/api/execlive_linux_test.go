package api_test

import (
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/agentbox/agentbox/client"
)

// TestLiveExecExchangesMatchDocument drives the live exec routes, the
// event filters and usage by workspace through the Go client with each
// exchange held to the served document: an ordinary exec run by one
// request is listed, read and followed by others while it waits for its
// input, and its end reaches the follower.
func TestLiveExecExchangesMatchDocument(t *testing.T) {
	check := newDocCheck(t)
	f := newSandboxFixture(t, check.wrap)
	ctx := t.Context()
	ws := f.ws.ID
	must := func(what string, err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	done := make(chan error, 1)
	go func() {
		_, err := f.cl.Exec(ctx, ws, client.Exec{Sh: "echo first '<b>'; while [ ! -e /tmp/go-on ]; do sleep 0.05; done; echo got more >&2"}, io.Discard, io.Discard)
		done <- err
	}()
	var running client.LiveExec
	for deadline := time.Now().Add(time.Minute); running.ID == ""; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("no running exec with output among the workspace's live execs within a minute")
		}
		les, err := f.cl.LiveExecs(ctx, ws)
		must("list live execs", err)
		for _, e := range les {
			if e.State == "running" && e.RingBytes > 0 && e.StdoutBytes > 0 {
				running = e
			}
		}
	}
	l, err := f.cl.LiveExecOutput(ctx, running.ID, client.LogOptions{})
	must("read", err)
	if l.Data != "first <b>\n" || l.Exec == nil || l.Exec.State != "running" {
		t.Errorf("read a running exec's output: %+v", l)
	}
	type result struct {
		out string
		end client.LiveExec
		err error
	}
	followed := make(chan result, 1)
	go func() {
		var out strings.Builder
		end, err := f.cl.FollowLiveExecOutput(ctx, running.ID, client.LogOptions{Stream: "stderr"}, func(l client.ProcessLogs) error {
			out.Write(l.Bytes())
			return nil
		})
		followed <- result{out.String(), end, err}
	}()
	_, err = f.cl.ExecBuffered(ctx, ws, client.Exec{Argv: []string{"touch", "/tmp/go-on"}}, nil)
	must("touch", err)
	must("the exec", <-done)
	got := <-followed
	must("follow", got.err)
	if got.out != "got more\n" || got.end.State != "exited" || got.end.ExitCode != 0 || got.end.FinishedAt == nil {
		t.Errorf("followed %q, ended %+v", got.out, got.end)
	}
	if _, err := f.cl.LiveExecOutput(ctx, "ex_nope", client.LogOptions{}); !errors.Is(err, client.ErrNotFound) {
		t.Errorf("an unknown exec: %v", err)
	}
	if _, err := f.cl.LiveExecOutput(ctx, running.ID, client.LogOptions{Stream: "both"}); !errors.Is(err, client.ErrInvalid) {
		t.Errorf("stream both: %v", err)
	}
	evs, err := f.cl.Events(ctx, client.EventFilter{TypePrefix: "exec.", Object: ws, Actor: "api", Newest: true, Limit: 1})
	must("events", err)
	if len(evs) != 1 || evs[0].Type != "exec.finished" || !strings.Contains(evs[0].Detail, running.ID) {
		t.Errorf("the newest exec event of the workspace by the API: %+v", evs)
	}
	if _, err := f.cl.Events(ctx, client.EventFilter{Newest: true, Before: evs[0].ID}); err != nil {
		t.Errorf("events before: %v", err)
	}
	u, err := f.cl.Usage(ctx, client.UsageFilter{ByWorkspace: true})
	must("usage by workspace", err)
	if len(u.Workspaces) == 0 || u.Workspaces[0].WorkspaceID == "" || len(u.Tasks) != 0 {
		t.Errorf("usage by workspace: %+v", u)
	}

	seen := strings.Join(check.covered(), "\n")
	for _, want := range []string{
		"listLiveExecs 200 application/json", "liveExecOutput 200 application/json", "liveExecOutput 200 application/x-ndjson",
		"liveExecOutput 404 application/json", "liveExecOutput 400 application/json", "listEvents 200 application/json", "usage 200 application/json",
	} {
		if !strings.Contains(seen, want) {
			t.Errorf("no exchange checked for %q; checked:\n%s", want, seen)
		}
	}
}
