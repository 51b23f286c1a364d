package main

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// startDaemonBackend starts a daemon whose sandboxes default to backend.
func startDaemonBackend(t *testing.T, data, backend string) *daemonProc {
	t.Helper()
	cfg := filepath.Join(t.TempDir(), "agentbox.yaml")
	if err := os.WriteFile(cfg, []byte("default_backend: "+backend+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	d := &daemonProc{data: data, logs: &bytes.Buffer{}}
	d.cmd = exec.Command(binary, "serve", "--data", data, "--config", cfg, "--log-level", "debug")
	d.cmd.Stdout, d.cmd.Stderr = d.logs, d.logs
	d.cmd.Env = append(os.Environ(), "AGENTBOX_DATA="+data)
	if err := d.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	cl := d.client(t)
	deadline := time.Now().Add(30 * time.Second)
	for {
		if _, err := cl.Health(t.Context()); err == nil {
			return d
		}
		if time.Now().After(deadline) {
			d.cmd.Process.Kill()
			t.Fatalf("daemon did not come up:\n%s", d.logs)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestEvalShippedTaskSet validates the task set of examples/eval the way
// SWE-bench validates its own, on docker and on gvisor: every reference
// patch resolves its task, an empty patch resolves none; and the agent
// loop with each task's scripted model resolves them all.
func TestEvalShippedTaskSet(t *testing.T) {
	requireDebianImage(t)
	tasks, err := filepath.Abs("../../examples/eval/tasks.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for _, backend := range []string{"docker", "gvisor"} {
		t.Run(backend, func(t *testing.T) {
			data := t.TempDir()
			d := startDaemonBackend(t, data, backend)
			defer d.stop(t)
			cleanupAll(t, data)
			for _, tc := range []struct {
				patch    string
				resolved float64
			}{{"reference", 2}, {"empty", 0}, {"solve", 2}} {
				out := mustCLI(t, data, "--json", "eval", tasks, "--patch", tc.patch)
				var rep map[string]any
				if err := json.Unmarshal([]byte(out), &rep); err != nil {
					t.Fatalf("eval --json: %v\n%s", err, out)
				}
				if rep["resolved"] != tc.resolved || rep["total"] != float64(2) {
					t.Errorf("eval --patch %s: resolved %v of %v\n%s", tc.patch, rep["resolved"], rep["total"], out)
				}
				for _, task := range rep["tasks"].([]any) {
					ev, _ := task.(map[string]any)["evidence"].(map[string]any)
					if tests, _ := ev["tests"].(map[string]any); tests == nil || tests["sandbox"] == "" {
						t.Errorf("no evidence from a sandbox: %v", task)
					}
				}
			}
			table := mustCLI(t, data, "eval", tasks, "--patch", "reference")
			if !strings.Contains(table, "TASK") || !strings.Contains(table, "resolved 2 of 2 (100%)") {
				t.Errorf("eval table:\n%s", table)
			}
			// The evidence ran on this backend.
			if !strings.Contains(d.logs.String(), `"backend":"`+backend+`"`) {
				t.Errorf("no sandbox on %s in the daemon's log", backend)
			}
		})
	}
}
