package main

import (
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentbox/agentbox/internal/sandbox/backendtest"
	"github.com/agentbox/agentbox/internal/testutil"
)

// TestReviewAndPush runs the result path through a real daemon and the
// CLI on the docker backend: three forked attempts, reviewed with the
// same test; the passing one is ready, the failing and the leaking ones
// blocked with their reasons; approving a blocked one is refused; the
// approved one is pushed (never to the default branch, never forced) to
// the repo's remote, a bare repository on the host.
func TestReviewAndPush(t *testing.T) {
	if err := exec.Command("docker", "info").Run(); err != nil {
		backendtest.SkipOrFail(t, "no docker engine: "+err.Error())
	}
	data := t.TempDir()
	src := testutil.NewRepo(t, map[string]string{"README.md": "hi\n"})
	remote := filepath.Join(t.TempDir(), "remote.git")
	testutil.Git(t, "", "clone", "-q", "--bare", src.Dir, remote)
	d := startDaemon(t, data)
	defer d.stop(t)
	cleanupAll(t, data)
	ok := func(args ...string) map[string]any {
		t.Helper()
		out, errOut, code := runCLI(t, data, "", append([]string{"--json"}, args...)...)
		if code != 0 {
			t.Fatalf("%q: exit %d: %s %s", args, code, out, errOut)
		}
		return oneJSON(t, out)
	}
	parent := ok("ws", "create", "--repo", remote, "--task", "Fix the greeting")["id"].(string)
	forks := ok("ws", "fork", parent, "-n", "3")["forks"].([]any)
	if len(forks) != 3 {
		t.Fatalf("ws fork -n 3 made %d", len(forks))
	}
	id := func(i int) string { return forks[i].(map[string]any)["id"].(string) }
	pass, fail, leak := id(0), id(1), id(2)
	write := func(ws, path, content string) {
		t.Helper()
		if out, errOut, code := runCLI(t, data, content, "files", "write", ws, path); code != 0 {
			t.Fatalf("files write %s: %s %s", path, out, errOut)
		}
	}
	write(pass, "greeting.txt", "hello\n")
	write(fail, "greeting.txt", "helo\n")
	write(leak, "greeting.txt", "hello\n")
	write(leak, "deploy.env", "GITHUB_TOKEN=ghp_"+strings.Repeat("a1B2", 9)+"\n")
	test := "grep -qx hello greeting.txt"

	review := func(ws string) map[string]any { return ok("review", ws, "--test", test) }
	rp, rf, rl := review(pass), review(fail), review(leak)
	findings := func(c map[string]any) string {
		var out []string
		for _, f := range c["findings"].([]any) {
			out = append(out, f.(string))
		}
		return strings.Join(out, "\n")
	}
	if rp["disposition"] != "ready" || findings(rp) != "" {
		t.Errorf("the passing attempt: %v %q", rp["disposition"], findings(rp))
	}
	if rf["disposition"] != "blocked" || !strings.Contains(findings(rf), "tests: \"grep -qx hello greeting.txt\" exited 1") {
		t.Errorf("the failing attempt: %v %q", rf["disposition"], findings(rf))
	}
	if rl["disposition"] != "blocked" || !strings.Contains(findings(rl), "check: github-token at deploy.env:1:14: ghp_…(40 bytes)") {
		t.Errorf("the leaking attempt: %v %q", rl["disposition"], findings(rl))
	}
	cmp := ok("compare", pass, fail, leak, parent)["candidates"].([]any)
	if len(cmp) != 4 {
		t.Fatalf("compare: %v", cmp)
	}
	for i, want := range []struct {
		disposition, tests string
		findings           float64
	}{{"ready", "passed", 0}, {"blocked", "failed", 1}, {"blocked", "passed", 1}} {
		r := cmp[i].(map[string]any)
		if r["disposition"] != want.disposition || r["tests"] != want.tests || r["findings"] != want.findings || r["files"] == float64(0) {
			t.Errorf("compare row %d: %v, want %+v", i, r, want)
		}
	}
	if r := cmp[3].(map[string]any); r["candidate"] != nil || !strings.Contains(r["note"].(string), "no candidate") {
		t.Errorf("compare of a workspace without a candidate: %v", r)
	}
	if out, _, code := runCLI(t, data, "", "compare", pass, fail); code != 0 || !strings.Contains(out, "DISPOSITION") || !strings.Contains(out, "blocked") {
		t.Errorf("compare table: exit %d\n%s", code, out)
	}
	// review WS again shows the newest candidate, makes none.
	if again := ok("review", pass); again["id"] != rp["id"] {
		t.Errorf("review %s shows %v, want the candidate %v", pass, again["id"], rp["id"])
	}

	_, errOut, code := runCLI(t, data, "", "review", "approve", rl["id"].(string), "--reason", "looks fine")
	if code == 0 || !strings.Contains(errOut, "is blocked and cannot be approved") || !strings.Contains(errOut, "github-token") {
		t.Errorf("approving the blocked attempt: exit %d %s", code, errOut)
	}
	if _, errOut, code := runCLI(t, data, "", "ws", "push", fail); code == 0 || !strings.Contains(errOut, "no approved candidate") {
		t.Errorf("pushing an unapproved attempt: exit %d %s", code, errOut)
	}
	approved := ok("review", "approve", rp["id"].(string), "--reason", "tests pass", "--actor", "ann")
	if approved["disposition"] != "approved" {
		t.Fatalf("approve: %v", approved)
	}
	pushed := ok("ws", "push", pass)["push"].(map[string]any)
	branch := "agentbox/fix-the-greeting/" + pass
	if pushed["branch"] != branch || pushed["commit"] != rp["commit"] || pushed["remote"] != remote {
		t.Errorf("push = %v, want %s at %v", pushed, branch, rp["commit"])
	}
	if got := testutil.Git(t, remote, "rev-parse", "refs/heads/"+branch); got != rp["commit"] {
		t.Errorf("the remote's %s is at %s, want the candidate %v", branch, got, rp["commit"])
	}
	if got := testutil.Git(t, remote, "show", branch+":greeting.txt"); got != "hello" {
		t.Errorf("the pushed greeting.txt = %q", got)
	}
	if got := testutil.Git(t, remote, "rev-parse", "refs/heads/main"); got != src.Commits[len(src.Commits)-1] {
		t.Errorf("the remote's main moved to %s", got)
	}
	ev := ok("events", "--workspace", pass)
	var types []string
	for _, e := range ev["events"].([]any) {
		types = append(types, e.(map[string]any)["type"].(string))
	}
	for _, want := range []string{"candidate.created", "candidate.approved", "candidate.pushed"} {
		if !strings.Contains(strings.Join(types, " "), want) {
			t.Errorf("events of %s: %q lack %s", pass, types, want)
		}
	}
	// A scratch workspace has no remote.
	scratch := ok("ws", "create", "--empty")["id"].(string)
	write(scratch, "a.txt", "a\n")
	c := ok("review", scratch, "--test", "true")
	ok("review", "approve", c["id"].(string), "--reason", "fine")
	if _, errOut, code := runCLI(t, data, "", "ws", "push", scratch); code == 0 || !strings.Contains(errOut, "has no remote to push to") {
		t.Errorf("pushing a scratch workspace: exit %d %s", code, errOut)
	}
}
