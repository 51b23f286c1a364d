package main

import (
	"archive/tar"
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentbox/agentbox/client"
)

// The agent-facing API through the CLI and a real daemon: buffered exec,
// shell strings, scratch and uploaded workspaces and the file tools, on
// every backend (issue 12).
func TestAgentAPIThroughTheCLI(t *testing.T) {
	everyBackend(t, testAgentAPI)
}

func testAgentAPI(t *testing.T, backend string) {
	data := t.TempDir()
	d := startDaemon(t, data)
	cleanupAll(t, data)
	t.Cleanup(func() { d.stop(t) })
	cli := func(stdin string, args ...string) (map[string]any, int) {
		t.Helper()
		out, errOut, code := runCLI(t, data, stdin, append([]string{"--json"}, args...)...)
		if strings.TrimSpace(out) == "" {
			t.Fatalf("agentbox %v: exit %d, no JSON document; stderr %s", args, code, errOut)
		}
		return oneJSON(t, out), code
	}
	ok := func(stdin string, args ...string) map[string]any {
		t.Helper()
		doc, code := cli(stdin, args...)
		if code != 0 {
			t.Fatalf("agentbox %v: exit %d: %v", args, code, doc)
		}
		return doc
	}
	if backend == "local" {
		ok("", "image", "build", "--kind", "busybox")
	}
	// The default limits: under gVisor the sentry's own threads count
	// against a pids limit, and one as low as 128 ends the sandbox now
	// and then when a command forks.
	sandboxOn := func(ws string) string {
		t.Helper()
		return ok("", "sandbox", "create", "--ws", ws, "--backend", backend, "--image", "agentbox/busybox:latest")["id"].(string)
	}

	// A scratch workspace: a repository with one empty commit.
	ws := ok("", "ws", "create", "--empty", "--task", "scratch")["id"].(string)
	sb := sandboxOn(ws)

	// Buffered exec: one document, output included; the exit status is
	// the command's.
	doc, code := cli("", "exec", ws, "--", "sh", "-c", "echo out; echo err >&2; exit 3")
	if code != 3 || doc["stdout"] != "out\n" || doc["stderr"] != "err\n" || doc["exit_code"] != float64(3) ||
		doc["signal"] != float64(0) || doc["timed_out"] != false || doc["oom"] != false || doc["truncated"] != false ||
		doc["duration_ms"] == nil || doc["id"] == nil || doc["sandbox_id"] != sb {
		t.Errorf("exec --json: exit %d %v", code, doc)
	}
	if res, _ := doc["result"].(map[string]any); res == nil || res["exit_code"] != float64(3) {
		t.Errorf("exec --json has no result document: %v", doc)
	}
	// A shell string, in /workspace.
	out, errOut, code := runCLI(t, data, "", "exec", "--sh", "echo $((6*7)) && pwd && ls -A", ws)
	if code != 0 || out != "42\n/workspace\n.git\n" {
		t.Errorf("exec --sh: exit %d %q %q", code, out, errOut)
	}
	doc, code = cli("", "exec", ws, "--max-output", "10", "--", "seq", "1", "1000")
	if code != 0 || doc["truncated"] != true || !strings.HasPrefix(doc["stdout"].(string), "1\n2\n3\n4\n5\n") || len(doc["stdout"].(string)) > 200 {
		t.Errorf("exec --json --max-output 10: exit %d %v", code, doc)
	}
	doc, code = cli("", "exec", "--sh", "kill -9 $$", ws)
	if code != 137 || doc["signal"] != float64(9) {
		t.Errorf("exec --json of a killed command: exit %d %v", code, doc)
	}
	doc, code = cli("", "exec", ws, "--timeout", "1s", "--", "sleep", "60")
	if code != 124 || doc["timed_out"] != true {
		t.Errorf("exec --json --timeout: exit %d %v", code, doc)
	}
	doc, code = cli("line one\nline two\n", "exec", ws, "--", "wc", "-l")
	if code != 0 || strings.TrimSpace(doc["stdout"].(string)) != "2" {
		t.Errorf("exec --json with stdin: exit %d %v", code, doc)
	}

	// The file tools, on what the sandbox sees and makes.
	ok("alpha\nbeta\ngamma\ndelta\n", "files", "write", ws, "notes/today/list.txt") // parents made
	doc = ok("", "files", "read", ws, "notes/today/list.txt", "--lines", "2:3")
	lines, _ := doc["lines"].([]any)
	if len(lines) != 2 || lines[0].(map[string]any)["line"] != float64(2) || lines[1].(map[string]any)["text"] != "gamma" || doc["content"] != "beta\ngamma\n" {
		t.Errorf("files read --lines 2:3 = %v", doc)
	}
	if out, _, _ := runCLI(t, data, "", "files", "read", ws, "notes/today/list.txt", "--bytes", "6:4"); out != "beta" {
		t.Errorf("files read --bytes 6:4 = %q", out)
	}
	doc = ok("", "files", "edit", ws, "notes/today/list.txt", "--old", "beta\ngamma", "--new", "BETA")
	if doc["replacements"] != float64(1) {
		t.Errorf("files edit = %v", doc)
	}
	doc, code = cli("", "files", "edit", ws, "notes/today/list.txt", "--old", "gamma", "--new", "x")
	if code == 0 || doc["error"].(map[string]any)["code"] != "conflict" || !strings.Contains(doc["error"].(map[string]any)["message"].(string), "not in the file") {
		t.Errorf("files edit of a missing text: exit %d %v", code, doc)
	}
	if out, _, code := runCLI(t, data, "", "exec", ws, "--", "cat", "notes/today/list.txt"); code != 0 || out != "alpha\nBETA\ndelta\n" {
		t.Errorf("the sandbox sees the edited file as %q (exit %d)", out, code)
	}
	ok("", "exec", "--sh", "mkdir -p made/in && echo from the sandbox > made/in/sandbox.txt", ws)
	doc = ok("", "files", "find", ws, "*.txt")
	if got := paths(doc["matches"]); got != "made/in/sandbox.txt notes/today/list.txt" {
		t.Errorf("files find *.txt = %s", got)
	}
	doc = ok("", "files", "ls", ws, "--depth", "3")
	if got := paths(doc["entries"]); got != ".git made made/in made/in/sandbox.txt notes notes/today notes/today/list.txt" {
		t.Errorf("files ls --depth 3 = %s", got)
	}
	if d := ok("", "ws", "diff", ws)["diff"].(string); !strings.Contains(d, "+from the sandbox") || !strings.Contains(d, "+BETA") {
		t.Errorf("ws diff of a scratch workspace = %q", d)
	}
	ok("", "ws", "commit", ws, "-m", "notes")
	if st := ok("", "ws", "status", ws); st["head"] == st["base_commit"] || len(st["changes"].([]any)) != 2 {
		t.Errorf("status after the commit = %v", st)
	}

	// A workspace from a local directory.
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "run.sh"), []byte("#!/bin/sh\necho ran $(cat data/in.txt)\n"), 0o755)
	os.Mkdir(filepath.Join(dir, "data"), 0o755)
	os.WriteFile(filepath.Join(dir, "data", "in.txt"), []byte("uploaded\n"), 0o644)
	os.Symlink("data/in.txt", filepath.Join(dir, "link"))
	os.Mkdir(filepath.Join(dir, ".git"), 0o755)
	os.WriteFile(filepath.Join(dir, ".git", "HEAD"), []byte("left out\n"), 0o644)
	up := ok("", "ws", "create", "--from", dir)["id"].(string)
	upSB := sandboxOn(up)
	doc, code = cli("", "exec", up, "--sh", "./run.sh && cat link")
	if code != 0 || doc["stdout"] != "ran uploaded\nuploaded\n" {
		t.Errorf("exec in an uploaded workspace: exit %d %v", code, doc)
	}
	if got := paths(ok("", "files", "ls", up, "--depth", "2")["entries"]); got != ".git data data/in.txt link run.sh" {
		t.Errorf("files of the upload = %s", got)
	}
	if head := ok("", "files", "read", up, ".git/HEAD")["content"]; head == "left out\n" {
		t.Errorf("the uploaded directory's .git came along")
	}
	if d := ok("", "ws", "status", up); d["dirty"] != false {
		t.Errorf("a fresh upload is dirty: %v", d)
	}

	// Unknown, empty and removed targets are not_found, named.
	notFound := func(what, name string, args ...string) {
		t.Helper()
		doc, code := cli("", args...)
		e, _ := doc["error"].(map[string]any)
		if code == 0 || e == nil || e["code"] != "not_found" || !strings.Contains(e["message"].(string), name) {
			t.Errorf("%s: exit %d %v, want not_found naming %q", what, code, doc, name)
		}
	}
	notFound("unknown workspace", "ws_nope", "exec", "ws_nope", "--", "true")
	notFound("empty target", `""`, "exec", "", "--", "true")
	ok("", "ws", "rm", up)
	notFound("removed workspace", up, "exec", up, "--", "true")
	notFound("removed workspace's sandbox", upSB, "exec", upSB, "--", "true")
	ok("", "sandbox", "rm", sb)
	notFound("removed sandbox", sb, "exec", "--sh", "true", sb)
}

// paths lists the "path" of each entry of a JSON array, space-separated.
func paths(v any) string {
	var out []string
	for _, e := range v.([]any) {
		out = append(out, e.(map[string]any)["path"].(string))
	}
	return strings.Join(out, " ")
}

// TestCLIErrorCodes: usage mistakes are invalid, unknown IDs not_found,
// each as one JSON document with --json; hostile uploads are refused and
// change nothing.
func TestCLIErrorCodes(t *testing.T) {
	data := t.TempDir()
	d := startDaemon(t, data)
	defer d.stop(t)
	cleanupAll(t, data)
	ws := ""
	if out, errOut, code := runCLI(t, data, "", "--json", "ws", "create", "--empty"); code != 0 {
		t.Fatalf("ws create --empty: %s %s", out, errOut)
	} else {
		ws = oneJSON(t, out)["id"].(string)
	}
	tests := []struct {
		args []string
		code string
		msg  string
	}{
		{[]string{"repo", "show", "repo_nope"}, "not_found", "repo_nope"},
		{[]string{"repo", "show", "https://example.invalid/r.git"}, "not_found", "example.invalid"},
		{[]string{"ws", "show", "ws_nope"}, "not_found", "ws_nope"},
		{[]string{"sandbox", "show", "sb_nope"}, "not_found", "sb_nope"},
		{[]string{"files", "read", "ws_nope", "x"}, "not_found", "ws_nope"},
		{[]string{"files", "read", ws, "nope.txt"}, "not_found", "nope.txt"},
		{[]string{"ws", "show"}, "invalid", "accepts 1 arg"},
		{[]string{"files", "read", ws}, "invalid", "files read"},
		{[]string{"ws", "create", "--bogus"}, "invalid", "unknown flag: --bogus"},
		{[]string{"ws", "create"}, "invalid", "--repo, --empty or --from"},
		{[]string{"ws", "create", "--empty", "--repo", "x"}, "invalid", "one of"},
		{[]string{"ws", "commit", ws}, "invalid", "--message"},
		{[]string{"bogus"}, "invalid", `unknown command "bogus"`},
		{[]string{"ws", "bogus"}, "invalid", `unknown command "bogus" for "agentbox ws"`},
		{[]string{"exec", ws}, "invalid", "missing the command"},
		{[]string{"exec", "--sh", "true", ws, "--", "true"}, "invalid", "not both"},
		{[]string{"exec", ws, "--max-output", "x", "--", "true"}, "invalid", "max-output"},
		{[]string{"files", "read", ws, "x", "--lines", "9:1"}, "invalid", "line range"},
		{[]string{"files", "ls", ws, "--depth", "0"}, "invalid", "depth"},
		{[]string{"files", "find", ws, "[x"}, "invalid", "glob"},
		{[]string{"files", "edit", ws, "x", "--old", "a"}, "invalid", "--new"},
		{[]string{"repo", "fetch", "repo_nope"}, "not_found", "repo_nope"},
	}
	for _, tt := range tests {
		out, errOut, code := runCLI(t, data, "", append([]string{"--json"}, tt.args...)...)
		if code == 0 || strings.TrimSpace(out) == "" {
			t.Errorf("agentbox %q: exit %d, stdout %q, stderr %q; want one error document", tt.args, code, out, errOut)
			continue
		}
		e, _ := oneJSON(t, out)["error"].(map[string]any)
		if e == nil || e["code"] != tt.code || !strings.Contains(e["message"].(string), tt.msg) {
			t.Errorf("agentbox %q = %v, want %s mentioning %q", tt.args, e, tt.code, tt.msg)
		}
		if strings.HasSuffix(e["message"].(string), ": invalid") {
			t.Errorf("agentbox %q: message ends with its class: %q", tt.args, e["message"])
		}
	}
	// Without --json: the same, on stderr, exit 1.
	if out, errOut, code := runCLI(t, data, "", "ws", "show"); code != 1 || out != "" || !strings.Contains(errOut, "accepts 1 arg") {
		t.Errorf("ws show without an ID: exit %d %q %q", code, out, errOut)
	}

	// Hostile uploads through the API: refused, nothing made.
	cl := d.client(t)
	for name, entries := range map[string][]tar.Header{
		"traversal":    {{Name: "../../outside", Typeflag: tar.TypeReg}},
		"absolute":     {{Name: "/etc/cron.d/x", Typeflag: tar.TypeReg}},
		"through link": {{Name: "l", Typeflag: tar.TypeSymlink, Linkname: "/etc"}, {Name: "l/passwd", Typeflag: tar.TypeReg}},
		"hard link":    {{Name: "h", Typeflag: tar.TypeLink, Linkname: "/etc/shadow"}},
		"device":       {{Name: "mem", Typeflag: tar.TypeChar, Devmajor: 1, Devminor: 1}},
		"fifo":         {{Name: "p", Typeflag: tar.TypeFifo}},
	} {
		var buf bytes.Buffer
		tw := tar.NewWriter(&buf)
		for _, h := range entries {
			h.Mode = 0o644
			tw.WriteHeader(&h)
		}
		tw.Close()
		if _, err := cl.UploadWorkspace(t.Context(), client.CreateWorkspace{}, &buf, false); !errors.Is(err, client.ErrInvalid) {
			t.Errorf("upload %s = %v, want invalid", name, err)
		}
	}
	wss, _ := cl.ListWorkspaces(t.Context(), "", "")
	repos, _ := cl.ListRepos(t.Context())
	if len(wss) != 1 || len(repos) != 1 {
		t.Errorf("after hostile uploads: %d workspaces, %d repos; want 1 and 1 (the empty one)", len(wss), len(repos))
	}
	for _, e := range dirNamesIn(t, filepath.Join(data, "repos")) {
		if strings.HasPrefix(e, ".tmp-") {
			t.Errorf("staging left: %s", e)
		}
	}
}

func dirNamesIn(t *testing.T, dir string) []string {
	t.Helper()
	es, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range es {
		out = append(out, e.Name())
	}
	return out
}
