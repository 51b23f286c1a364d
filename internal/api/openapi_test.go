package api_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/agentbox/agentbox/client"
	"github.com/agentbox/agentbox/internal/testutil"
)

// TestExchangesMatchDocument drives every route that needs no sandbox
// through the Go client (and raw HTTP where the client does not go), with
// each exchange held to the served OpenAPI document: a route, a field, a
// type or a media type that drifts between the handlers, the client and
// the document fails here.
func TestExchangesMatchDocument(t *testing.T) {
	check := newDocCheck(t)
	f := newFixture(t, "", check.wrap)
	ctx := t.Context()
	cl := f.cl
	must := func(what string, err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	_, err := cl.Health(ctx)
	must("health", err)
	_, err = cl.OpenAPI(ctx)
	must("openapi", err)
	_, err = cl.ListRepos(ctx) // none yet: an empty list
	must("list repos", err)
	src := testutil.NewRepo(t, map[string]string{"a.txt": "a\n", "src/b.go": "package b\n"})
	repo, err := cl.AddRepo(ctx, "file://"+src.Dir, func(string) {})
	must("add repo (streamed)", err)
	_, err = cl.AddRepo(ctx, "file://"+src.Dir, nil)
	must("add repo again", err)
	_, err = cl.GetRepo(ctx, repo.ID)
	must("get repo", err)
	_, err = cl.FetchRepo(ctx, repo.ID, "", nil)
	must("fetch", err)
	_, err = cl.FetchRepo(ctx, repo.ID, "", func(string) {})
	must("fetch (streamed)", err)
	ws, err := cl.CreateWorkspace(ctx, client.CreateWorkspace{Repo: repo.ID, Task: "doc", Disk: 0})
	must("create workspace", err)
	empty, err := cl.CreateWorkspace(ctx, client.CreateWorkspace{Empty: true})
	must("create empty workspace", err)
	dir := t.TempDir()
	up, err := cl.UploadDir(ctx, client.CreateWorkspace{Task: "up"}, dir, nil)
	must("upload", err)
	_, err = cl.ListWorkspaces(ctx, "", "")
	must("list workspaces", err)
	_, err = cl.GetWorkspace(ctx, ws.ID)
	must("get workspace", err)

	_, err = cl.WriteFile(ctx, ws.ID, "dir/new.txt", strings.NewReader("hello\nworld\n"), 0o644, true)
	must("write", err)
	var sink strings.Builder
	_, err = cl.ReadFile(ctx, ws.ID, "dir/new.txt", &sink)
	must("read", err)
	_, err = cl.ReadFileContent(ctx, ws.ID, "dir/new.txt", client.Range{FirstLine: 2})
	must("read lines", err)
	_, err = cl.StatFile(ctx, ws.ID, "dir/new.txt")
	must("stat", err)
	_, err = cl.ListFiles(ctx, ws.ID, ".")
	must("list", err)
	_, err = cl.ListTree(ctx, ws.ID, ".", 3)
	must("tree", err)
	_, err = cl.Mkdir(ctx, ws.ID, "made/deep", true)
	must("mkdir", err)
	must("rename", cl.Rename(ctx, ws.ID, "made/deep", "made/deeper"))
	_, err = cl.Grep(ctx, ws.ID, client.GrepRequest{Pattern: "world"})
	must("grep", err)
	_, err = cl.EditFile(ctx, ws.ID, client.EditRequest{Path: "dir/new.txt", Old: "world", New: "there"})
	must("edit", err)
	_, err = cl.FindFiles(ctx, ws.ID, client.FindRequest{Pattern: "*.go"})
	must("find", err)
	must("remove file", cl.RemoveFile(ctx, ws.ID, "made", true))
	_, err = cl.Status(ctx, ws.ID)
	must("status", err)
	_, err = cl.Diff(ctx, ws.ID)
	must("diff", err)
	_, err = cl.CheckDiff(ctx, ws.ID, json.RawMessage(`{"writable_paths": ["src/**"], "limits": {"disk": "1G", "exec_timeout": 30}}`))
	must("diff check", err)
	_, err = cl.CheckDiff(ctx, ws.ID, nil)
	must("diff check without a policy", err)
	_, err = cl.Commit(ctx, ws.ID, "doc", &client.Author{Name: "A", Email: "a@example.com"})
	must("commit", err)
	fork, err := cl.Fork(ctx, ws.ID, client.Fork{Task: "fork"})
	must("fork", err)

	_, err = cl.ListSandboxes(ctx, "")
	must("list sandboxes", err)
	_, err = cl.Events(ctx, client.EventFilter{Workspace: ws.ID, Limit: 50})
	must("events", err)
	fctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	errStop := errors.New("enough")
	err = cl.FollowEvents(fctx, client.EventFilter{Workspace: ws.ID}, func(client.Event) error { return errStop })
	cancel()
	if !errors.Is(err, errStop) {
		t.Fatalf("follow events: %v", err)
	}
	// The same stream as SSE.
	sctx, scancel := context.WithTimeout(ctx, time.Second)
	req, _ := http.NewRequestWithContext(sctx, "GET", f.srv.URL+"/v1/events?follow=true&workspace="+ws.ID, nil)
	req.Header.Set("Accept", "text/event-stream")
	if resp, err := http.DefaultClient.Do(req); err == nil {
		buf := make([]byte, 4096)
		resp.Body.Read(buf) // the events logged so far, then the deadline
		scancel()
		resp.Body.Close()
	}
	scancel()
	_, err = cl.Usage(ctx, client.UsageFilter{Since: "1h"})
	must("usage", err)
	_, err = cl.GC(ctx, client.GCRequest{DryRun: true, Budget: 1 << 40})
	must("gc", err)
	_, err = cl.ListNodes(ctx)
	must("nodes", err)

	// Errors are documented replies too.
	for _, bad := range []func() error{
		func() error { _, err := cl.GetWorkspace(ctx, "ws_nope"); return err },
		func() error { _, err := cl.GetSandbox(ctx, "sb_nope"); return err },
		func() error { _, err := cl.SandboxUsage(ctx, "sb_nope"); return err },
		func() error { _, err := cl.ListSecrets(ctx); return err }, // no secret store here
		func() error { return cl.SetSecret(ctx, "NAME", "value") },
		func() error { return cl.RemoveSecret(ctx, "NAME") },
		func() error {
			_, err := cl.EditFile(ctx, ws.ID, client.EditRequest{Path: "a.txt", Old: "zz"})
			return err
		},
		func() error {
			_, err := cl.CreateSandbox(ctx, client.CreateSandbox{Workspace: ws.ID, Policy: json.RawMessage(`{"bogus": 1}`)})
			return err
		},
		func() error { _, err := cl.StopSandbox(ctx, "sb_nope"); return err },
		func() error { return cl.RemoveSandbox(ctx, "sb_nope") },
	} {
		if err := bad(); err == nil {
			t.Error("a bad request succeeded")
		}
	}
	resp, err := http.Get(f.srv.URL + "/metrics")
	must("metrics", err)
	resp.Body.Close()

	for _, id := range []string{fork.ID, ws.ID, empty.ID, up.ID} {
		must("remove workspace", cl.RemoveWorkspace(ctx, id))
	}
	_, err = cl.RemoveRepo(ctx, repo.ID, false)
	must("remove repo", err)

	seen := strings.Join(check.covered(), "\n")
	for _, want := range []string{
		"addRepo 200 application/x-ndjson", "addRepo 200 application/json", "fetchRepo 200 application/x-ndjson",
		"createWorkspace 201 application/json", "readFile 200 application/octet-stream", "readFile 200 application/json",
		"listEvents 200 application/x-ndjson", "listEvents 200 text/event-stream", "checkDiff 200 application/json",
		"getWorkspace 404 application/json", "metrics 404 application/json",
	} {
		if !strings.Contains(seen, want) {
			t.Errorf("no exchange checked for %q; checked:\n%s", want, seen)
		}
	}
}
