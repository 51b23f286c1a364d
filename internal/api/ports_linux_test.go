package api_test

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/agentbox/agentbox/client"
)

// TestForwardPort sends a request through /v1/sandboxes/{id}/ports/{port}/
// to a server in the sandbox that records what it received: the path and
// query arrive as the client escaped them, with the client's headers but
// not its Authorization, which is the daemon's and never enters a
// sandbox. Bad ports, unknown sandboxes and stopped ones get errors with
// their class.
func TestForwardPort(t *testing.T) {
	f := newSandboxFixture(t)
	ctx := t.Context()
	const port = 18000
	// A one-shot server that records the request's head and body on its
	// stderr before it answers.
	const server = `#!/bin/sh
while IFS= read -r line; do
	echo "$line" >&2
	case "$line" in "$(printf '\r')" | "") break ;; esac
done
head -c 8 >&2
printf 'HTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\nok'
`
	if _, err := f.cl.WriteFile(ctx, f.ws.ID, "srv.sh", strings.NewReader(server), 0o755, false); err != nil {
		t.Fatal(err)
	}
	srv, err := f.cl.StartProcess(ctx, f.ws.ID, client.Exec{Argv: []string{"nc", "-l", "-p", fmt.Sprint(port), "-e", "/workspace/srv.sh"}})
	if err != nil {
		t.Fatal(err)
	}
	base := fmt.Sprintf("%s/v1/sandboxes/%s/ports/%d/", f.srv.URL, srv.SandboxID, port)
	deadline := time.Now().Add(30 * time.Second)
	for {
		req, _ := http.NewRequestWithContext(ctx, "POST", base+"some/pa%2Fth?q=1", strings.NewReader("the body"))
		req.Header.Set("Authorization", "Bearer daemon-token-canary")
		req.Header.Set("X-Custom", "kept")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode == 200 {
			if string(b) != "ok" {
				t.Errorf("body through the forwarding: %q", b)
			}
			break
		}
		// 503 until nc listens.
		if resp.StatusCode != http.StatusServiceUnavailable || time.Now().After(deadline) {
			t.Fatalf("forwarding: %s %s", resp.Status, b)
		}
		time.Sleep(50 * time.Millisecond) // nc starting, bounded by the deadline
	}
	p, err := f.cl.WaitProcess(ctx, f.ws.ID, srv.ID, 30*time.Second)
	if err != nil || p.State != "exited" {
		t.Fatalf("the server: %+v %v", p, err)
	}
	l, err := f.cl.ProcessLogs(ctx, f.ws.ID, srv.ID, client.LogOptions{Stream: "stderr"})
	if err != nil {
		t.Fatal(err)
	}
	got := l.Data
	for _, want := range []string{"POST /some/pa%2Fth?q=1 HTTP/1.1\r\n", "Host: 127.0.0.1:18000\r\n", "X-Custom: kept\r\n", "the body"} {
		if !strings.Contains(got, want) {
			t.Errorf("the server did not receive %q:\n%s", want, got)
		}
	}
	if strings.Contains(got, "daemon-token-canary") || strings.Contains(strings.ToLower(got), "authorization") {
		t.Errorf("the daemon's Authorization reached the sandbox:\n%s", got)
	}

	for _, tc := range []struct {
		path   string
		status int
	}{
		{fmt.Sprintf("/v1/sandboxes/%s/ports/0/", srv.SandboxID), 400},
		{fmt.Sprintf("/v1/sandboxes/%s/ports/70000/", srv.SandboxID), 400},
		{fmt.Sprintf("/v1/sandboxes/%s/ports/x/", srv.SandboxID), 400},
		{"/v1/sandboxes/sb_nope/ports/80/", 404},
	} {
		resp, err := http.Get(f.srv.URL + tc.path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != tc.status {
			t.Errorf("GET %s: %s, want %d", tc.path, resp.Status, tc.status)
		}
	}
	if _, err := f.cl.StopSandbox(ctx, srv.SandboxID); err != nil {
		t.Fatal(err)
	}
	resp, err := http.Get(base)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusConflict {
		t.Errorf("forwarding to a stopped sandbox: %s, want 409", resp.Status)
	}
	if _, err := f.cl.PublishPort(ctx, srv.SandboxID, port); !errors.Is(err, client.ErrConflict) {
		t.Errorf("publishing a port of a stopped sandbox: %v", err)
	}
}
