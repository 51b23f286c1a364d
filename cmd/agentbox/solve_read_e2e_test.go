package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentbox/agentbox/internal/testutil"
)

// readingScript's coder lists, greps and tries to read a link to a host
// file, then reads one line, then edits; each turn's expect insists that
// the request holds what the calls before it returned, through the real
// file API of a real workspace (else the scripted model fails the run).
const readingScript = `
planner:
  - calls: [{name: submit_plan, args: {files: [], approach: "find add and make it add"}}]
coder:
  - calls:
      - {name: list_files, args: {glob: "*.py"}}
      - {name: grep, args: {pattern: "def add"}}
      - {name: read_file, args: {path: host-link}}
  - expect: ["calc.py\ntest_calc.py", "calc.py:1: def add(a, b):", "<untrusted-sandbox-output>", "read_file failed", "host-link"]
    calls: [{name: read_file, args: {path: calc.py, start_line: 2, end_line: 2}}]
  - expect: ["2\t    return a - b"]
    calls: [{name: edit_file, args: {path: calc.py, old: "return a - b", new: "return a + b"}}]
`

// TestSolveCoderReads: in a real workspace and sandbox, the scripted
// coder reads before it edits, through the manager's file API (a link
// to a host file is refused, not followed), and the run ends in a ready
// candidate whose logs show the reading.
func TestSolveCoderReads(t *testing.T) {
	requireDebianImage(t)
	data := t.TempDir()
	src := testutil.NewRepo(t, map[string]string{
		"calc.py":      "def add(a, b):\n    return a - b\n",
		"test_calc.py": "from calc import add\n\n\ndef test_add():\n    assert add(2, 3) == 5\n",
	})
	if err := os.Symlink("/etc/shadow", filepath.Join(src.Dir, "host-link")); err != nil {
		t.Fatal(err)
	}
	testutil.Git(t, src.Dir, "add", "host-link")
	testutil.Git(t, src.Dir, "commit", "-qm", "a link out")
	script := filepath.Join(t.TempDir(), "script.yaml")
	if err := os.WriteFile(script, []byte(readingScript), 0o644); err != nil {
		t.Fatal(err)
	}
	d := startDaemon(t, data)
	defer d.stop(t)
	cleanupAll(t, data)
	out, errOut, code := runCLI(t, data, "", "--json", "solve", "--repo", src.Dir, "--task", "add(2, 3) returns -1; it should return 5",
		"--test", "python3 -m pytest -q", "--model", "scripted:"+script)
	if code != 0 {
		t.Fatalf("solve: exit %d\n%s\n%s", code, out, errOut)
	}
	var rep solveReport
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("solve --json: %v\n%s", err, out)
	}
	a := rep.Run.Attempts[0]
	if !strings.HasPrefix(a.Stop, "passed") || a.Iterations != 1 || a.Disposition != "ready" {
		t.Fatalf("attempt %+v", a)
	}
	logs := mustCLI(t, data, "solve", "logs", rep.Run.ID)
	if !strings.Contains(logs, "patch: 1 edit(s) after 2 model calls reading the workspace") {
		t.Errorf("solve logs do not show the reading:\n%s", logs)
	}
	shadow, _ := os.ReadFile("/etc/shadow")
	if line, _, _ := strings.Cut(string(shadow), "\n"); line != "" && strings.Contains(out+logs, line) {
		t.Errorf("the host's /etc/shadow reached the run's record")
	}
}
