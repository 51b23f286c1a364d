package api_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/agentbox/agentbox/client"
)

// TestProcessExchangesMatchDocument drives every process and port route
// through the Go client with each exchange held to the served document:
// the replies, the NDJSON lines of a followed read and the errors.
func TestProcessExchangesMatchDocument(t *testing.T) {
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
	p, err := f.cl.StartProcess(ctx, ws, client.Exec{Sh: "echo ready; read l; echo \"got $l\"; printf '\\377' >&2", Stdin: "first\n"})
	must("start", err)
	_, err = f.cl.ListProcesses(ctx, ws)
	must("list", err)
	_, err = f.cl.GetProcess(ctx, ws, p.ID)
	must("get", err)
	var out strings.Builder
	end, err := f.cl.FollowProcessLogs(ctx, ws, p.ID, client.LogOptions{}, func(l client.ProcessLogs) error {
		out.Write(l.Bytes())
		return nil
	})
	must("follow", err)
	if out.String() != "ready\ngot first\n" || end.State != "exited" {
		t.Errorf("followed %q, ended %+v", out.String(), end)
	}
	l, err := f.cl.ProcessLogs(ctx, ws, p.ID, client.LogOptions{Stream: "stderr"})
	must("logs", err)
	if string(l.Bytes()) != "\xff" || l.DataB64 == "" {
		t.Errorf("stderr that is not UTF-8: %+v", l)
	}
	_, err = f.cl.WaitProcess(ctx, ws, p.ID, time.Second)
	must("wait", err)
	if _, err := f.cl.WriteStdin(ctx, ws, p.ID, []byte("late"), false); !errors.Is(err, client.ErrConflict) {
		t.Errorf("stdin to an ended process: %v", err)
	}
	if _, err := f.cl.GetProcess(ctx, ws, "ex_nope"); !errors.Is(err, client.ErrNotFound) {
		t.Errorf("an unknown process: %v", err)
	}
	if _, err := f.cl.ProcessLogs(ctx, ws, p.ID, client.LogOptions{Stream: "both"}); !errors.Is(err, client.ErrInvalid) {
		t.Errorf("logs of stream both: %v", err)
	}

	term, err := f.cl.StartProcess(ctx, ws, client.Exec{Sh: "read l", TTY: true, Cols: 90, Rows: 20})
	must("start on a terminal", err)
	if !term.TTY || term.Cols != 90 || term.Rows != 20 {
		t.Errorf("a process on a terminal: %+v", term)
	}
	r, err := f.cl.ResizeProcess(ctx, ws, term.ID, 100, 30)
	must("resize", err)
	if r.Cols != 100 || r.Rows != 30 {
		t.Errorf("resized: %+v", r)
	}
	if _, err := f.cl.ResizeProcess(ctx, ws, term.ID, 0, 30); !errors.Is(err, client.ErrInvalid) {
		t.Errorf("resizing to 0 columns: %v", err)
	}
	if _, err := f.cl.ResizeProcess(ctx, ws, p.ID, 100, 30); !errors.Is(err, client.ErrInvalid) {
		t.Errorf("resizing a process without a terminal: %v", err)
	}
	if _, err := f.cl.StartProcess(ctx, ws, client.Exec{Sh: "true", Cols: 90}); !errors.Is(err, client.ErrInvalid) {
		t.Errorf("a size without tty: %v", err)
	}
	_, err = f.cl.SignalProcess(ctx, ws, term.ID, "KILL")
	must("kill the terminal's process", err)

	srv, err := f.cl.StartProcess(ctx, ws, client.Exec{Argv: []string{"nc", "-l", "-p", "18001"}})
	must("start a server", err)
	_, err = f.cl.WriteStdin(ctx, ws, srv.ID, []byte("hi\n"), true)
	must("stdin", err)
	port, err := f.cl.PublishPort(ctx, ws, 18001)
	must("publish", err)
	if !strings.HasPrefix(port.URL, "http://127.0.0.1:") {
		t.Errorf("published port %+v", port)
	}
	_, err = f.cl.ListPorts(ctx, ws)
	must("list ports", err)
	must("unpublish", f.cl.UnpublishPort(ctx, ws, 18001))
	if err := f.cl.UnpublishPort(ctx, ws, 18001); !errors.Is(err, client.ErrNotFound) {
		t.Errorf("unpublishing twice: %v", err)
	}
	if _, err := f.cl.PublishPort(ctx, ws, 0); !errors.Is(err, client.ErrInvalid) {
		t.Errorf("publishing port 0: %v", err)
	}
	_, err = f.cl.SignalProcess(ctx, ws, srv.ID, "KILL")
	must("signal", err)
	if _, err := f.cl.SignalProcess(ctx, ws, srv.ID, "NOPE"); !errors.Is(err, client.ErrInvalid) {
		t.Errorf("an unknown signal: %v", err)
	}

	seen := strings.Join(check.covered(), "\n")
	for _, want := range []string{
		"startProcess 201 application/json", "listProcesses 200 application/json", "getProcess 200 application/json",
		"processLogs 200 application/json", "processLogs 200 application/x-ndjson", "processStdin 200 application/json",
		"processStdin 409 application/json", "signalProcess 200 application/json", "waitProcess 200 application/json",
		"resizeProcess 200 application/json", "resizeProcess 400 application/json",
		"getProcess 404 application/json", "publishPort 201 application/json", "listPorts 200 application/json",
		"unpublishPort 200 application/json", "unpublishPort 404 application/json", "publishPort 400 application/json",
	} {
		if !strings.Contains(seen, want) {
			t.Errorf("no exchange checked for %q; checked:\n%s", want, seen)
		}
	}
}
