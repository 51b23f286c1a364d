package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/agentbox/agentbox/internal/image"
	"github.com/agentbox/agentbox/internal/testutil"
	"github.com/agentbox/agentbox/internal/testutil/skip"
)

// TestObservabilityThroughTheCLI drives a real daemon: `events --follow`
// sees an exec that ends after it started and keeps to its workspace,
// `usage` sums two tasks apart and honours --task and --since, and the
// daemon's JSON log names the workspace, sandbox and exec of an exec.
func TestObservabilityThroughTheCLI(t *testing.T) {
	if err := exec.Command("docker", "info").Run(); err != nil {
		skip.OrFail(t, fmt.Sprintf("no docker engine: %v", err))
	}
	if _, err := image.Build(t.Context(), image.BuildOptions{Kind: image.KindBusybox}); err != nil {
		t.Fatal(err)
	}
	data := t.TempDir()
	src := testutil.NewRepo(t, map[string]string{"hello.txt": "hello\n"})
	d := startDaemon(t, data)
	cleanupAll(t, data)
	stopped := false
	t.Cleanup(func() {
		if !stopped {
			d.stop(t)
		}
	})
	j := func(args ...string) map[string]any {
		t.Helper()
		out, errOut, code := runCLI(t, data, "", append([]string{"--json"}, args...)...)
		if code != 0 {
			t.Fatalf("agentbox %v: exit %d\n%s%s", args, code, out, errOut)
		}
		return oneJSON(t, out)
	}
	wsA := j("ws", "create", "--repo", src.Dir, "--task", "alpha")["id"].(string)
	wsB := j("ws", "create", "--repo", src.Dir, "--task", "beta")["id"].(string)
	for _, ws := range []string{wsA, wsB} {
		j("sandbox", "create", "--ws", ws, "--backend", "docker", "--image", "agentbox/busybox:latest")
	}

	// The follower: its first lines are the events logged before it.
	follow := exec.Command(binary, "--json", "events", "--follow", "--workspace", wsA)
	follow.Env = append(os.Environ(), "AGENTBOX_DATA="+data)
	stdout, err := follow.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var followErr strings.Builder
	follow.Stderr = &followErr
	if err := follow.Start(); err != nil {
		t.Fatal(err)
	}
	type line struct {
		ID          int64  `json:"id"`
		Type        string `json:"type"`
		Actor       string `json:"actor"`
		WorkspaceID string `json:"workspace_id"`
		SandboxID   string `json:"sandbox_id"`
		Detail      string `json:"detail"`
	}
	lines := make(chan line, 100)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			var l line
			if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
				t.Errorf("follow printed a line that is not an event: %q", sc.Text())
				continue
			}
			lines <- l
		}
	}()
	next := func(what string, ok func(line) bool) line {
		t.Helper()
		timeout := time.After(30 * time.Second)
		for {
			select {
			case l, open := <-lines:
				if !open {
					t.Fatalf("follow ended before %s: %s", what, followErr.String())
				}
				if l.WorkspaceID != wsA {
					t.Errorf("follow --workspace %s printed %+v", wsA, l)
				}
				if ok(l) {
					return l
				}
			case <-timeout:
				t.Fatalf("follow printed no %s within 30s", what)
			}
		}
	}
	next("sandbox.created", func(l line) bool { return l.Type == "sandbox.created" })

	// Execs after the follower started; B's must not reach it.
	execJSON := func(ws, script string) map[string]any {
		t.Helper()
		out, errOut, code := runCLI(t, data, "", "--json", "exec", ws, "--", "sh", "-c", script)
		res, ok := oneJSON(t, out)["result"].(map[string]any)
		if code != 0 || !ok {
			t.Fatalf("exec in %s: exit %d %s %s", ws, code, out, errOut)
		}
		return res
	}
	execJSON(wsB, "echo b")
	resA := execJSON(wsA, "dd if=/dev/zero of=/dev/null bs=16M count=1 2>/dev/null; echo a")
	if resA["peak_mem_bytes"].(float64) < 16<<20 {
		t.Errorf("exec result peak_mem_bytes = %v, want >= 16 MiB", resA["peak_mem_bytes"])
	}
	between := time.Now().UTC()
	time.Sleep(10 * time.Millisecond) // the clock moves past between
	ev := next("exec.finished", func(l line) bool { return l.Type == "exec.finished" })
	if ev.SandboxID != resA["sandbox_id"] || !strings.Contains(ev.Detail, resA["exec_id"].(string)) || ev.Actor != "api" {
		t.Errorf("followed exec.finished = %+v, want exec %v", ev, resA["exec_id"])
	}
	// The follower ends cleanly when interrupted.
	follow.Process.Signal(syscall.SIGINT)
	if err := follow.Wait(); err != nil {
		t.Errorf("follow after SIGINT: %v %s", err, followErr.String())
	}
	for l := range lines {
		if l.WorkspaceID != wsA {
			t.Errorf("follow --workspace %s printed %+v", wsA, l)
		}
	}
	execJSON(wsB, "echo b again")

	// Usage: two tasks apart, one task, and since a time.
	type task struct {
		Task        string  `json:"task"`
		Execs       int64   `json:"execs"`
		CPUSeconds  float64 `json:"cpu_seconds"`
		PeakMem     int64   `json:"peak_mem_bytes"`
		WallSeconds float64 `json:"wall_seconds"`
		OutputBytes int64   `json:"output_bytes"`
	}
	usage := func(args ...string) map[string]task {
		t.Helper()
		out, errOut, code := runCLI(t, data, "", append([]string{"--json", "usage"}, args...)...)
		if code != 0 {
			t.Fatalf("usage %v: exit %d %s %s", args, code, out, errOut)
		}
		var doc struct{ Tasks []task }
		if err := json.Unmarshal([]byte(out), &doc); err != nil {
			t.Fatal(err)
		}
		m := map[string]task{}
		for _, u := range doc.Tasks {
			m[u.Task] = u
		}
		return m
	}
	all := usage()
	a, b := all["alpha"], all["beta"]
	if len(all) != 2 || a.Execs != 1 || b.Execs != 2 || a.PeakMem < 16<<20 || a.OutputBytes != 2 || b.OutputBytes != 10 || a.WallSeconds <= 0 {
		t.Errorf("usage = %+v", all)
	}
	if one := usage("--task", "alpha"); len(one) != 1 || one["alpha"] != a {
		t.Errorf("usage --task alpha = %+v", one)
	}
	if since := usage("--since", between.Format(time.RFC3339Nano)); len(since) != 1 || since["beta"].Execs != 1 {
		t.Errorf("usage --since = %+v", since)
	}
	if out, _, code := runCLI(t, data, "", "usage", "--since", "yesterday"); code == 0 {
		t.Errorf("usage --since yesterday exited 0: %s", out)
	}
	if out, _, code := runCLI(t, data, "", "usage"); code != 0 || !strings.Contains(out, "alpha") || !strings.Contains(out, "CPU S") {
		t.Errorf("usage table: exit %d\n%s", code, out)
	}

	// The daemon's log, read once it has stopped (and written everything).
	d.stop(t)
	stopped = true
	var execLine, requestLine, followLine bool
	for _, l := range strings.Split(d.logs.String(), "\n") {
		var rec map[string]any
		if json.Unmarshal([]byte(l), &rec) != nil {
			continue
		}
		ids := rec["workspace_id"] == wsA && rec["sandbox_id"] == resA["sandbox_id"] && rec["exec_id"] == resA["exec_id"]
		switch {
		case rec["msg"] == "exec finished" && ids:
			execLine = true
		case rec["msg"] == "request" && ids && rec["method"] == "POST" && rec["status"] == 200.0 && rec["request_id"] != nil:
			requestLine = true
		case rec["msg"] == "request" && rec["path"] == "/v1/events":
			followLine = true
		case rec["msg"] == "agentbox stopping" && !followLine:
			t.Error("the follow request had not ended when the daemon was stopped")
		}
	}
	if !execLine || !requestLine {
		t.Errorf("daemon log: exec line with its ids %v, request line with them %v\n%s", execLine, requestLine, d.logs)
	}
}
