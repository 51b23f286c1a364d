package main

import (
	"bytes"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/agentbox/agentbox/internal/sandbox/backendtest"
	"github.com/agentbox/agentbox/internal/testutil"
)

// TestPullRequestOnGitea is the result path against a real forge: a repo
// cached from a local Gitea, three forked attempts reviewed with the same
// test (ready, blocked by the test, blocked by a token-like string), the
// blocked one refused, the ready one approved, pushed with a token the
// sandbox never saw and opened as a pull request whose body carries the
// evidence; a second approved candidate updates the same pull request.
func TestPullRequestOnGitea(t *testing.T) {
	if err := exec.Command("docker", "info").Run(); err != nil {
		backendtest.SkipOrFail(t, "no docker engine: "+err.Error())
	}
	g := testutil.StartGitea(t)
	cloneURL := g.CreateRepo(t, "greeter", map[string]string{"README.md": "greeter\n", "greeting.txt": "helo\n"})
	u, err := url.Parse(cloneURL)
	if err != nil {
		t.Fatal(err)
	}
	data := t.TempDir()
	d := startDaemon(t, data)
	defer d.stop(t)
	cleanupAll(t, data)
	ok := func(stdin string, args ...string) map[string]any {
		t.Helper()
		out, errOut, code := runCLI(t, data, stdin, append([]string{"--json"}, args...)...)
		if code != 0 {
			t.Fatalf("%q: exit %d: %s %s", args, code, out, errOut)
		}
		return oneJSON(t, out)
	}
	ok(g.Token+"\n", "secret", "set", "GITEA_TOKEN")
	ok("", "forge", "set", u.Host, "--kind", "gitea", "--secret", "GITEA_TOKEN", "--user", g.User, "--api", g.APIURL)
	ok("", "repo", "add", cloneURL)
	parent := ok("", "ws", "create", "--repo", cloneURL, "--task", "Fix the greeting")["id"].(string)
	forks := ok("", "ws", "fork", parent, "-n", "3")["forks"].([]any)
	id := func(i int) string { return forks[i].(map[string]any)["id"].(string) }
	pass, fail, leak := id(0), id(1), id(2)
	write := func(ws, path, content string) { ok(content, "files", "write", ws, path) }
	write(pass, "greeting.txt", "hello\n")
	write(fail, "greeting.txt", "hullo\n")
	write(leak, "greeting.txt", "hello\n")
	write(leak, "notes.txt", "token: ghp_"+strings.Repeat("a1B2", 9)+"\n")
	test := "grep -qx hello greeting.txt"
	rp := ok("", "review", pass, "--test", test)
	rf := ok("", "review", fail, "--test", test)
	rl := ok("", "review", leak, "--test", test)
	for _, tc := range []struct {
		c           map[string]any
		disposition string
		finding     string
	}{{rp, "ready", ""}, {rf, "blocked", "tests: "}, {rl, "blocked", "check: github-token at notes.txt"}} {
		fs, _ := tc.c["findings"].([]any)
		all := ""
		for _, f := range fs {
			all += f.(string) + "\n"
		}
		if tc.c["disposition"] != tc.disposition || !strings.Contains(all, tc.finding) {
			t.Errorf("candidate of %v: %v %q, want %s with %q", tc.c["workspace_id"], tc.c["disposition"], all, tc.disposition, tc.finding)
		}
	}
	if _, errOut, code := runCLI(t, data, "", "review", "approve", rl["id"].(string), "--reason", "ship"); code == 0 || !strings.Contains(errOut, "github-token") {
		t.Errorf("approving the blocked attempt: exit %d %s", code, errOut)
	}
	ok("", "review", "approve", rp["id"].(string), "--reason", "the test passes")
	c := ok("", "ws", "pr", pass)
	pr := c["pr"].(map[string]any)
	branch := "agentbox/fix-the-greeting/" + pass
	num := int(pr["number"].(float64))
	var got struct {
		Title, Body, State string
		Head               struct{ Ref string }
		Base               struct{ Ref string }
		Labels             []struct{ Name string }
	}
	g.API(t, "GET", "/repos/"+g.User+"/greeter/pulls/"+strconv.Itoa(num), nil, &got)
	if got.Head.Ref != branch || got.Base.Ref != "main" || got.State != "open" || got.Title != "Fix the greeting" {
		t.Errorf("the pull request: %+v", got)
	}
	for _, want := range []string{rp["id"].(string), "`" + test + "`: passed", "the test passes", "1 file(s)"} {
		if !strings.Contains(got.Body, want) {
			t.Errorf("the pull request's body lacks %q:\n%s", want, got.Body)
		}
	}
	if len(got.Labels) != 1 || got.Labels[0].Name != "agentbox" {
		t.Errorf("labels %+v", got.Labels)
	}

	// The token never reached a sandbox, a log, an event or a file.
	out, _, _ := runCLI(t, data, "", "exec", pass, "--", "sh", "-c", "env; cat /proc/[0-9]*/environ /proc/[0-9]*/cmdline 2>/dev/null | tr '\\0' '\\n'; grep -r . /workspace /tmp 2>/dev/null")
	events, _, _ := runCLI(t, data, "", "--json", "events", "--limit", "10000")
	for what, text := range map[string]string{"the sandbox": out, "the events": events, "the daemon's log": d.logs.String()} {
		if strings.Contains(text, g.Token) {
			t.Errorf("%s holds the forge token", what)
		}
	}
	// Every file of the data dir, the workspaces' files through their
	// mounts. A workspace's disk image (a sparse file of its quota's size)
	// is skipped: its files are walked through the mount.
	filepath.WalkDir(data, func(p string, de os.DirEntry, err error) error {
		if err != nil || !de.Type().IsRegular() {
			return nil
		}
		if info, err := de.Info(); err != nil || info.Size() > 64<<20 {
			return nil
		}
		if b, err := os.ReadFile(p); err == nil && bytes.Contains(b, []byte(g.Token)) {
			t.Errorf("%s holds the forge token", p)
		}
		return nil
	})

	// A new approved candidate of the same workspace updates the PR.
	write(pass, "greeting.txt", "hello\n")
	write(pass, "CHANGELOG", "fixed the greeting\n")
	c2 := ok("", "review", pass, "--test", test)
	ok("", "review", "approve", c2["id"].(string), "--reason", "with a changelog")
	pr2 := ok("", "ws", "pr", pass)["pr"].(map[string]any)
	if int(pr2["number"].(float64)) != num || pr2["updated"] != true {
		t.Errorf("the second pr: %v, want #%d updated", pr2, num)
	}
	if head := testutil.Git(t, "", "ls-remote", cloneURL, "refs/heads/"+branch); !strings.HasPrefix(head, c2["commit"].(string)) {
		t.Errorf("the remote's %s: %q, want %v", branch, head, c2["commit"])
	}
}
