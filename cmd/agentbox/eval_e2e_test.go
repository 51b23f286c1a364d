package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentbox/agentbox/internal/evalset"
	"github.com/agentbox/agentbox/internal/sandbox/backendtest"
	"github.com/agentbox/agentbox/internal/testutil"
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

// TestEvalGoSolve runs the agent loop on a Go task: the loop sees only
// pass_to_pass, the hidden tests of the fix release are applied to its
// best attempt, and the verdict is theirs. The scripted coder writes the
// fixed file, taken at test time from the reference patch (no other
// project's code is kept in this repository); a coder that changes
// nothing leaves the task unresolved.
func TestEvalGoSolve(t *testing.T) {
	requireDebianImage(t)
	if err := exec.Command("docker", "image", "inspect", toolsImage).Run(); err != nil {
		backendtest.SkipOrFail(t, "no "+toolsImage+" image (scripts/test.sh builds it)")
	}
	set, _, err := loadEvalSet("../../examples/eval/go-fixes.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var task evalTask
	for _, tk := range set.Tasks {
		if tk.ID == "go-version-equal-nil" {
			task = tk
		}
	}
	if task.GoModule == nil {
		t.Fatal("no go-version-equal-nil task in go-fixes.yaml")
	}
	// The fixed version.go: the base with the reference patch applied.
	cache, err := evalset.DefaultCache()
	if err != nil {
		t.Fatal(err)
	}
	proxy, err := evalset.ProxyFromEnv()
	if err != nil {
		t.Fatal(err)
	}
	r, err := (&evalset.Fetcher{Proxy: proxy, Cache: cache}).Build(t.Context(), *task.GoModule, filepath.Join(t.TempDir(), "w"))
	if err != nil {
		t.Fatal(err)
	}
	work := t.TempDir()
	testutil.Git(t, "", "clone", "-q", r.Dir, work)
	apply := exec.Command("git", "-C", work, "apply", "-")
	apply.Stdin = strings.NewReader(r.Patch)
	if out, err := apply.CombinedOutput(); err != nil {
		t.Fatalf("git apply: %v %s", err, out)
	}
	fixed, err := os.ReadFile(filepath.Join(work, "version.go"))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	for name, content := range map[string]string{"fixed": string(fixed), "unchanged": "package version\n\n// Nothing to fix here.\n"} {
		path := "version.go"
		if name == "unchanged" {
			path = "notes.go"
		}
		script, _ := json.Marshal(map[string]any{
			"planner": []any{map[string]any{"calls": []any{map[string]any{"name": "submit_plan", "args": map[string]any{"files": []string{"version.go"}, "approach": "nil-safe Equal"}}}}},
			"coder":   []any{map[string]any{"calls": []any{map[string]any{"name": "write_file", "args": map[string]any{"path": path, "content": content}}}}},
		})
		if err := os.WriteFile(filepath.Join(dir, name+".json"), script, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	tasks := filepath.Join(dir, "tasks.yaml")
	doc := "tasks:\n"
	for _, name := range []string{"fixed", "unchanged"} {
		doc += fmt.Sprintf("  - id: %s\n    go_module: {path: %s, base: %s, base_hash: %q, fix: %s, fix_hash: %q}\n    packages: [\".\"]\n    problem: %q\n    fail_to_pass: %q\n    pass_to_pass: %q\n    script: %s.json\n",
			name, task.GoModule.Path, task.GoModule.Base, task.GoModule.BaseHash, task.GoModule.Fix, task.GoModule.FixHash, task.Problem, task.FailToPass, task.PassToPass, name)
	}
	doc = strings.ReplaceAll(doc, `" "`, `", "`)
	if err := os.WriteFile(tasks, []byte(doc), 0o644); err != nil {
		t.Fatal(err)
	}
	data := t.TempDir()
	d := startDaemonBackend(t, data, "docker", toolsImage)
	defer d.stop(t)
	cleanupAll(t, data)
	out := mustCLI(t, data, "--json", "eval", tasks, "--patch", "solve")
	var rep struct {
		Resolved, Total int
		Tasks           []evalResult
	}
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("eval --json: %v\n%s", err, out)
	}
	if rep.Resolved != 1 || rep.Total != 2 {
		t.Fatalf("resolved %d of %d\n%s", rep.Resolved, rep.Total, out)
	}
	for _, res := range rep.Tasks {
		// Both loops passed their visible tests; only the hidden ones
		// tell the fix from no fix.
		if !strings.HasPrefix(res.Stop, "passed") || res.Resolved != (res.ID == "fixed") || !res.PassToPass {
			t.Errorf("task %s: %+v", res.ID, res)
		}
		if !strings.Contains(res.Evidence.Tests.Command, "TestVersionEqual_nil") {
			t.Errorf("task %s: the verdict's test %q", res.ID, res.Evidence.Tests.Command)
		}
	}
}
