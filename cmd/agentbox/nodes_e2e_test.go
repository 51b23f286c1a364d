package main

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentbox/agentbox/client"
	"github.com/agentbox/agentbox/internal/bench"
	"github.com/agentbox/agentbox/internal/testutil"
	"github.com/agentbox/agentbox/internal/testutil/pgtest"
)

// TestLoadThreeNodes is the load test against three daemons sharing one
// PostgreSQL, each on its own data dir: 32 clients spread round-robin
// over the nodes, so that most requests are about an object another node
// owns and are forwarded; new workspaces are placed on the least loaded
// node. Every check of the one-node load test holds: no error, nothing
// left on any node.
func TestLoadThreeNodes(t *testing.T) {
	requireDocker(t)
	var log bytes.Buffer
	res, err := bench.Load(t.Context(), bench.LoadOptions{
		DaemonOptions: bench.DaemonOptions{Binary: binary, Store: pgtest.NewDatabase(t)},
		Clients:       32,
		Duration:      20 * time.Second,
		Nodes:         3,
	}, &log)
	if err != nil {
		t.Fatalf("%v\n%s", err, log.String())
	}
	var out bytes.Buffer
	res.Print(&out)
	t.Logf("\n%s", out.String())
	if !res.OK() {
		t.Errorf("load checks failed\n%s", log.String())
	}
	for _, op := range res.Ops {
		if op.Count == 0 {
			t.Errorf("operation %s never completed", op.Op)
		}
	}
}

// TestKill9Node kills one of three daemons sharing PostgreSQL with
// SIGKILL while 32 clients write through all three (files through the
// API, files written by commands in sandboxes), the workspaces on shared
// storage (the copy driver; one machine's disk is shared by its data
// dirs). Every write any node acknowledged is read back afterwards
// through a survivor, the dead node's workspaces included: a survivor
// adopted them once the dead node's lease lapsed, and marked its
// sandboxes lost. Then the load runs on the two survivors with no error,
// and everything is removed through them.
func TestKill9Node(t *testing.T) {
	requireDocker(t)
	var log bytes.Buffer
	res, err := bench.Failover(t.Context(), bench.FailoverOptions{
		DaemonOptions: bench.DaemonOptions{Binary: binary, Store: pgtest.NewDatabase(t),
			NodeHeartbeat: time.Second, NodeShared: true, WorkspaceDriver: "copy", NoDiskQuota: true},
		Nodes: 3, Clients: 32, Before: 10 * time.Second, After: 10 * time.Second,
	}, &log)
	if err != nil {
		t.Fatalf("%v\n%s", err, log.String())
	}
	var out bytes.Buffer
	res.Print(&out)
	t.Logf("\n%s", out.String())
	if !res.OK() {
		t.Errorf("failover checks failed\n%s", log.String())
	}
	// The lease is 3 heartbeats of 1s: a survivor acts within a few
	// beats of it.
	if res.LostAfter > 10*time.Second {
		t.Errorf("the killed node's sandboxes were lost %s after the kill, want within 10s", res.LostAfter)
	}
}

// TestKill9NodeUnshared is TestKill9Node without shared storage (the
// default driver and disk quotas): nobody adopts the dead node's
// workspaces; reading a write acknowledged in one fails while it is down,
// unavailable and naming it, and succeeds once it is started again on
// its data dir. The survivors serve everything else with no error.
func TestKill9NodeUnshared(t *testing.T) {
	requireDocker(t)
	var log bytes.Buffer
	res, err := bench.Failover(t.Context(), bench.FailoverOptions{
		DaemonOptions: bench.DaemonOptions{Binary: binary, Store: pgtest.NewDatabase(t), NodeHeartbeat: time.Second},
		Nodes:         3, Clients: 9, Before: 5 * time.Second, After: 5 * time.Second,
	}, &log)
	if err != nil {
		t.Fatalf("%v\n%s", err, log.String())
	}
	var out bytes.Buffer
	res.Print(&out)
	t.Logf("\n%s", out.String())
	if !res.OK() {
		t.Errorf("failover checks failed\n%s", log.String())
	}
	if res.Adopted != 0 {
		t.Errorf("%d workspaces adopted without shared storage", res.Adopted)
	}
}

// lineWaiter is a stdout that says when a line has been written.
type lineWaiter struct {
	mu  sync.Mutex
	buf bytes.Buffer
	ch  chan struct{}
}

func (l *lineWaiter) Write(b []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.buf.Write(b)
	select {
	case l.ch <- struct{}{}:
	default:
	}
	return len(b), nil
}

func (l *lineWaiter) waitFor(t *testing.T, s string) {
	t.Helper()
	deadline := time.After(30 * time.Second)
	for {
		l.mu.Lock()
		got := l.buf.String()
		l.mu.Unlock()
		if strings.Contains(got, s) {
			return
		}
		select {
		case <-l.ch:
		case <-deadline:
			t.Fatalf("no %q in %q", s, got)
		}
	}
}

// TestForwardedStreams checks the streams of a workspace on one node
// reached through another: an exec whose input streams while its output
// does (full duplex: each line is answered before the next is sent), an
// exec as server-sent events, a shell over WebSocket, and a follower of
// the event log on the other node seeing the owner's events. A request
// that only claims to come from a node is refused.
func TestForwardedStreams(t *testing.T) {
	requireDocker(t)
	url := pgtest.NewDatabase(t)
	dataA, dataB := t.TempDir(), t.TempDir()
	a := startDaemon(t, dataA, "--store", url)
	defer a.stop(t)
	b := startDaemon(t, dataB, "--store", url)
	defer func() { b.stop(t) }()
	nodeA := oneNode(t, dataA, a)
	src := testutil.NewRepo(t, map[string]string{"hello.txt": "hello\n"})
	ca, cb := a.client(t), b.client(t)
	ws, err := ca.CreateWorkspace(t.Context(), client.CreateWorkspace{Repo: src.Dir})
	if err != nil {
		t.Fatal(err)
	}
	defer ca.RemoveWorkspace(context.Background(), ws.ID)
	if ws.Node != nodeA {
		// Placement: both nodes idle, the node asked keeps the work.
		t.Fatalf("workspace placed on %s, want the idle node asked, %s", ws.Node, nodeA)
	}

	// A follower on B, of A's workspace.
	fctx, stopFollow := context.WithCancel(t.Context())
	defer stopFollow()
	seen := make(chan string, 100)
	go cb.FollowEvents(fctx, client.EventFilter{Workspace: ws.ID}, func(e client.Event) error {
		seen <- e.Type
		return nil
	})

	// Full duplex through B: the second line is sent only once the
	// first has been answered.
	pr, pw := io.Pipe()
	out := &lineWaiter{ch: make(chan struct{}, 1)}
	done := make(chan error, 1)
	var res client.ExecResult
	go func() {
		var err error
		res, err = cb.ExecStdin(t.Context(), ws.ID, client.Exec{Argv: []string{"sh", "-c", `while read l; do echo "got $l"; done; exit 4`}}, pr, out, io.Discard)
		done <- err
	}()
	pw.Write([]byte("one\n"))
	out.waitFor(t, "got one\n")
	pw.Write([]byte("two\n"))
	out.waitFor(t, "got two\n")
	pw.Close()
	if err := <-done; err != nil || res.ExitCode != 4 {
		t.Fatalf("exec with streamed stdin through the other node: %+v, %v", res, err)
	}

	// Server-sent events through B.
	hc := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", filepath.Join(dataB, "agentbox.sock"))
	}}}
	req, _ := http.NewRequestWithContext(t.Context(), "POST", "http://agentbox/v1/workspaces/"+ws.ID+"/exec",
		strings.NewReader(`{"argv":["cat","hello.txt"]}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "text/event-stream")
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.Contains(string(body), "event: stdout") || !strings.Contains(string(body), "event: result") ||
		resp.Header.Get("X-Agentbox-Node") != nodeA {
		t.Errorf("SSE exec through the other node: %s (served by %q)\n%s", resp.Status, resp.Header.Get("X-Agentbox-Node"), body)
	}
	// One request ID, the same on both nodes: the exec's events name it.
	rid := resp.Header.Values("X-Request-Id")
	if len(rid) != 1 {
		t.Fatalf("request IDs of a forwarded request: %q", rid)
	}
	evs, err := ca.Events(t.Context(), client.EventFilter{Workspace: ws.ID})
	if err != nil || !slices.ContainsFunc(evs, func(e client.Event) bool { return strings.Contains(e.Detail, rid[0]) }) {
		t.Errorf("no event of the owner names the forwarded request %s (%v)", rid[0], err)
	}

	// A shell through B.
	sh, err := cb.Shell(t.Context(), ws.ID, client.Shell{Argv: []string{"sh", "-c", `read x; echo "shell $x"; exit 5`}})
	if err != nil {
		t.Fatal(err)
	}
	sh.Write([]byte("hi\n"))
	sout := &lineWaiter{ch: make(chan struct{}, 1)}
	go io.Copy(sout, sh)
	sout.waitFor(t, "shell hi")
	if ex, err := sh.Wait(t.Context()); err != nil || ex.ExitCode != 5 {
		t.Errorf("shell through the other node: %+v, %v", ex, err)
	}
	sh.Close()

	// The follower on B saw the execs A recorded.
	deadline := time.After(30 * time.Second)
	for execs := 0; execs < 2; {
		select {
		case typ := <-seen:
			if strings.HasPrefix(typ, "exec.") {
				execs++
			}
		case <-deadline:
			t.Fatalf("the follower on the other node saw %d exec events of the owner", execs)
		}
	}

	// B restarts: its start-up repairs (recovery, the reconciler) touch
	// only its own objects, so A's sandbox keeps running and the next
	// command runs in it, not in a replacement.
	b.stop(t)
	b = startDaemon(t, dataB, "--store", url)
	again, err := cb.Exec(t.Context(), ws.ID, client.Exec{Argv: []string{"true"}}, io.Discard, io.Discard)
	if err != nil || again.Replaced || again.SandboxID != res.SandboxID {
		t.Errorf("exec after the other node restarted: %+v, %v; want it in %s, not replaced", again, err, res.SandboxID)
	}

	// Forged forwarding headers: refused.
	req, _ = http.NewRequestWithContext(t.Context(), "GET", "http://agentbox/v1/workspaces/"+ws.ID+"/diff", nil)
	for k, v := range map[string]string{"X-Agentbox-Node-From": nodeA, "X-Agentbox-Node-To": oneNode(t, dataB, b),
		"X-Agentbox-Node-Time": strconv.FormatInt(time.Now().Unix(), 10), "X-Agentbox-Principal": "token",
		"X-Agentbox-Node-Signature": strings.Repeat("ab", 32)} {
		req.Header.Set(k, v)
	}
	if resp, err := hc.Do(req); err != nil || resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("a forged forwarded request: %v, %v", resp.Status, err)
	}

	// New work goes to the less loaded node: asked of A, which holds a
	// workspace and a sandbox, B makes it. Removing the repo with force
	// through A removes the workspaces of both.
	ws2, err := ca.CreateWorkspace(t.Context(), client.CreateWorkspace{Repo: src.Dir})
	if err != nil {
		t.Fatal(err)
	}
	if nodeB := oneNode(t, dataB, b); ws2.Node != nodeB {
		t.Errorf("a workspace asked of the loaded node was placed on %s, want the idle %s", ws2.Node, nodeB)
	}
	if _, err := ca.RemoveRepo(t.Context(), ws.RepoID, true); err != nil {
		t.Fatalf("removing the repo with its workspaces on both nodes: %v", err)
	}
	for _, id := range []string{ws.ID, ws2.ID} {
		if _, err := cb.GetWorkspace(t.Context(), id); !errors.Is(err, client.ErrNotFound) {
			t.Errorf("workspace %s after its repo was removed with force: %v", id, err)
		}
	}
}
