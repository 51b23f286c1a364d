package dashboard_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentbox/agentbox/client"
	"github.com/agentbox/agentbox/internal/config"
	"github.com/agentbox/agentbox/internal/daemon"
	"github.com/agentbox/agentbox/internal/testutil"
	"github.com/agentbox/agentbox/internal/testutil/skip"
	"github.com/agentbox/agentbox/internal/testutil/syncbuf"
)

// guestBin is the agentbox-guest the test daemons put in their sandboxes.
var guestBin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "agentbox-dash-")
	if err != nil {
		panic(err)
	}
	guestBin = filepath.Join(dir, "agentbox-guest")
	build := exec.Command("go", "build", "-o", guestBin, "../../cmd/agentbox-guest")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "building agentbox-guest: %v\n%s", err, out)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// syncBuffer is written by one goroutine while the test reads it.
type syncBuffer = syncbuf.Buffer

// testDaemon is a real daemon (in this process) on loopback TCP with a
// token, whose sandboxes run on Docker.
type testDaemon struct {
	URL   string // http://127.0.0.1:PORT
	Token string
	Data  string
	CL    *client.Client
	logs  *syncBuffer
}

// startDaemon runs daemon.Run on 127.0.0.1 with a fresh token and data
// dir; its cleanup removes every workspace, then stops it.
func startDaemon(t *testing.T) *testDaemon {
	t.Helper()
	if os.Geteuid() != 0 {
		skip.OrFail(t, "the dashboard's daemon tests run sandboxes: they need root")
	}
	if _, err := os.Stat("/var/run/docker.sock"); err != nil {
		skip.OrFail(t, "no Docker engine at /var/run/docker.sock")
	}
	b := make([]byte, 20)
	rand.Read(b)
	d := &testDaemon{Token: hex.EncodeToString(b), Data: t.TempDir(), logs: &syncBuffer{}}
	cfg := config.Default()
	cfg.DataDir = d.Data
	cfg.Listen = "tcp://127.0.0.1:0"
	cfg.Token = d.Token
	cfg.GuestBinary = guestBin
	cfg.DefaultBackend = "docker"
	cfg.DefaultImage = "agentbox/busybox:latest"
	cfg.DataBudget = 20 << 30 // the overview shows its use
	cfg.ShutdownGrace = config.Duration{Duration: 5 * time.Second}
	log := slog.New(slog.NewTextHandler(d.logs, &slog.HandlerOptions{Level: slog.LevelInfo}))
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan string, 1)
	errc := make(chan error, 1)
	go func() { errc <- daemon.Run(ctx, cfg, log, func(addr string) { ready <- addr }) }()
	select {
	case addr := <-ready:
		d.URL = "http://" + strings.TrimPrefix(addr, "tcp://")
		cl, err := client.New(addr, d.Token)
		if err != nil {
			cancel()
			t.Fatal(err)
		}
		d.CL = cl
	case err := <-errc:
		cancel()
		t.Fatalf("daemon did not start: %v\n%s", err, d.logs)
	case <-time.After(60 * time.Second):
		cancel()
		t.Fatalf("daemon did not start within 60s\n%s", d.logs)
	}
	t.Cleanup(func() {
		ctx := context.Background()
		wss, _ := d.CL.ListWorkspaces(ctx, "", "")
		for _, w := range wss {
			if err := d.CL.RemoveWorkspace(ctx, w.ID); err != nil {
				t.Errorf("removing %s: %v", w.ID, err)
			}
		}
		cancel()
		if err := <-errc; err != nil {
			t.Errorf("daemon: %v", err)
		}
		if t.Failed() {
			t.Logf("daemon log:\n%s", d.logs)
		}
	})
	return d
}

// The agent-controlled values of the XSS battery: each would run script
// or add an element if a page rendered it as HTML.
const (
	hostileFile   = `<img src=x onerror=alert(1)>`
	hostileTask   = `task<script>alert("task")</script>`
	hostileBranch = `feat/<img/src=x/onerror=alert(2)>`
	hostileOutput = `<script>alert("out")</script>`
	hostileArg    = `<img src=x onerror=alert(3)>`
	// hostileExecOutput is an ordinary exec's output, shown live.
	hostileExecOutput = `<img src=x onerror=alert("exec")><b>exec</b>`
	// hostileSolveTask is a solve run's problem statement: its first
	// line labels the run's workspaces.
	hostileSolveTask = `solve <img src=x onerror=alert(5)> the README`
)

// solveScript is a scripted model whose two calls fix nothing much and
// say what they cost: 2000 tokens in, 400 out, $0.0144.
const solveScript = `
planner:
  - calls:
      - name: submit_plan
        args: {files: [README], approach: "greet louder", test: "true"}
    usage: {input_tokens: 800, output_tokens: 55, cost_usd: 0.0021}
coder:
  - calls:
      - name: edit_file
        args: {path: README, old: "hello", new: "hello there"}
    usage: {input_tokens: 1200, output_tokens: 345, cost_usd: 0.0123}
`

// hostileWorkspace is a workspace whose task label, branch, files,
// commands and output carry HTML, with a change against its base.
type hostileWorkspace struct {
	ID     string
	RepoID string
}

func seedHostile(t *testing.T, d *testDaemon) hostileWorkspace {
	t.Helper()
	ctx := t.Context()
	src := testutil.NewRepo(t, map[string]string{"main.go": "package main\n\nfunc main() {}\n", "README": "hello\n"})
	repo, err := d.CL.AddRepo(ctx, src.Dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	ws, err := d.CL.CreateWorkspace(ctx, client.CreateWorkspace{Repo: repo.ID, Task: hostileTask, Branch: hostileBranch})
	if err != nil {
		t.Fatalf("creating the hostile workspace: %v", err)
	}
	write := func(path, content string) {
		t.Helper()
		if _, err := d.CL.WriteFile(ctx, ws.ID, path, strings.NewReader(content), 0o644, true); err != nil {
			t.Fatalf("writing %q: %v", path, err)
		}
	}
	write("main.go", "package main\n\nimport \"fmt\"\n\n// main greets.\nfunc main() { fmt.Println(\"dashboard-diff-marker\", 42) }\n")
	write(hostileFile, "file-body-marker\n")
	write("dir<b>bold</b>/x.txt", "nested\n")
	return hostileWorkspace{ID: ws.ID, RepoID: repo.ID}
}
