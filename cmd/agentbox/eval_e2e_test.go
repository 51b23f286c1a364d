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

	"github.com/agentbox/agentbox/internal/sandbox/backendtest"
)

// startDaemonBackend starts a daemon whose sandboxes default to backend
// and, if image is not empty, to image.
func startDaemonBackend(t *testing.T, data, backend, image string) *daemonProc {
	t.Helper()
	cfg := filepath.Join(t.TempDir(), "agentbox.yaml")
	doc := "default_backend: " + backend + "\n"
	if image != "" {
		doc += "default_image: " + image + "\n"
	}
	if err := os.WriteFile(cfg, []byte(doc), 0o644); err != nil {
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

// TestEvalShippedTaskSet validates the task sets of examples/eval the
// way SWE-bench validates its own, on docker and on gvisor: every
// reference patch resolves its task, an empty patch resolves none; and the
// agent loop with each seeded task's scripted model resolves them all.
// The Go tasks (go-fixes.yaml) are rebuilt from the module proxy's zips
// and run with the Go of agentbox/debian:tools, the daemon's default
// image here (the Python tasks run there too).
func TestEvalShippedTaskSet(t *testing.T) {
	requireDebianImage(t)
	if err := exec.Command("docker", "image", "inspect", toolsImage).Run(); err != nil {
		backendtest.SkipOrFail(t, "no "+toolsImage+" image (scripts/test.sh builds it)")
	}
	seeded, err := filepath.Abs("../../examples/eval/tasks.yaml")
	if err != nil {
		t.Fatal(err)
	}
	goFixes, err := filepath.Abs("../../examples/eval/go-fixes.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for _, backend := range []string{"docker", "gvisor"} {
		t.Run(backend, func(t *testing.T) {
			data := t.TempDir()
			d := startDaemonBackend(t, data, backend, toolsImage)
			defer d.stop(t)
			cleanupAll(t, data)
			for _, tc := range []struct {
				tasks    string
				patch    string
				resolved float64
				total    float64
			}{
				{seeded, "reference", 2, 2}, {seeded, "empty", 0, 2}, {seeded, "solve", 2, 2},
				{goFixes, "reference", 4, 4}, {goFixes, "empty", 0, 4},
			} {
				start := time.Now()
				out := mustCLI(t, data, "--json", "eval", tc.tasks, "--patch", tc.patch, "--parallel", "4")
				t.Logf("eval %s --patch %s: %s", filepath.Base(tc.tasks), tc.patch, time.Since(start).Round(time.Second))
				var rep map[string]any
				if err := json.Unmarshal([]byte(out), &rep); err != nil {
					t.Fatalf("eval --json: %v\n%s", err, out)
				}
				if rep["resolved"] != tc.resolved || rep["total"] != tc.total {
					t.Errorf("eval %s --patch %s: resolved %v of %v\n%s", filepath.Base(tc.tasks), tc.patch, rep["resolved"], rep["total"], out)
				}
				for _, task := range rep["tasks"].([]any) {
					task := task.(map[string]any)
					ev, _ := task["evidence"].(map[string]any)
					tests, _ := ev["tests"].(map[string]any)
					if tests == nil || tests["sandbox"] == "" {
						t.Errorf("no evidence from a sandbox: %v", task)
						continue
					}
					// An empty patch fails on the tests' verdict, not
					// on a missing tool or a patch that did not apply.
					if tc.patch == "empty" && (tests["exit_code"] == float64(127) || task["pass_to_pass"] != true) {
						t.Errorf("eval --patch empty of %s did not fail on its tests: %v", task["id"], task)
					}
				}
			}
			table := mustCLI(t, data, "eval", seeded, "--patch", "reference")
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

// toolsImage is the image with Go (1.19), Python and git that
// scripts/test.sh builds.
const toolsImage = "agentbox/debian:tools"
