package manager

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentbox/agentbox/internal/apitypes"
	"github.com/agentbox/agentbox/internal/errdefs"
	"github.com/agentbox/agentbox/internal/testutil"
)

// TestReview makes candidates on the real docker backend: the evidence
// (tests in a fresh sandbox on a fork of exactly the commit, the diff
// check, the stats) decides blocked or ready; only a person approves a
// ready one; the forks go.
func TestReview(t *testing.T) {
	h, _ := sandboxHarness(t)
	ctx := t.Context()
	count := func() int {
		wss, err := h.m.ListWorkspaces(ctx, ListFilter{})
		if err != nil {
			t.Fatal(err)
		}
		return len(wss)
	}
	pass := h.create(CreateRequest{Task: "fix the bug"})
	fail := h.create(CreateRequest{})
	leak := h.create(CreateRequest{})
	before := count()
	h.writeFile(pass.ID, "fix.txt", "fixed\n")
	h.writeFile(fail.ID, "fix.txt", "half\n")
	h.writeFile(leak.ID, "fix.txt", "fixed\n")
	h.writeFile(leak.ID, "conf.txt", "token = \"ghp_"+strings.Repeat("a1B2", 9)+"\"\n")
	// The test sees the fork, which holds exactly the candidate's files.
	test := `grep -qx fixed fix.txt && echo "1 passed"`

	c, err := h.m.Review(ctx, pass.ID, apitypes.ReviewRequest{Test: test, Regress: "test ! -e nothing.txt"})
	if err != nil {
		t.Fatal(err)
	}
	if c.Disposition != apitypes.DispositionReady || len(c.Findings) != 0 {
		t.Fatalf("passing candidate: %s %q", c.Disposition, c.Findings)
	}
	if ev := c.Evidence.Tests; ev == nil || !ev.Passed || ev.Output != "1 passed\n" || ev.Sandbox == "" {
		t.Errorf("test evidence = %+v", ev)
	}
	if ev := c.Evidence.Regress; ev == nil || !ev.Passed {
		t.Errorf("regression evidence = %+v", ev)
	}
	if c.Evidence.Stats != (apitypes.DiffStats{Files: 1, Insertions: 1}) || !c.Evidence.Check.OK {
		t.Errorf("stats %+v, check %+v", c.Evidence.Stats, c.Evidence.Check)
	}
	if st := h.status(pass.ID); st.Head != c.Commit || len(st.Changes) != 1 {
		t.Errorf("the candidate's commit %s is not the branch's head: %+v", c.Commit, st)
	}
	if n := count(); n != before {
		t.Errorf("%d workspaces after the reviews, %d before: a fork was left", n, before)
	}
	got, err := h.m.Decide(ctx, c.ID, apitypes.DispositionApproved, "ann", "tests pass")
	if err != nil || got.Disposition != apitypes.DispositionApproved || got.Decision.Actor != "ann" {
		t.Fatalf("approve: %+v, %v", got, err)
	}
	if _, err := h.m.Decide(ctx, c.ID, apitypes.DispositionRejected, "bob", "changed my mind"); !errors.Is(err, errdefs.ErrConflict) {
		t.Errorf("a second decision: %v, want ErrConflict", err)
	}
	if evs := h.events(pass.ID, "candidate.approved"); len(evs) != 1 || evs[0].Actor != "ann" || !strings.Contains(evs[0].Detail, "tests pass") {
		t.Errorf("approval events: %+v", evs)
	}

	c, err = h.m.Review(ctx, fail.ID, apitypes.ReviewRequest{Test: test})
	if err != nil {
		t.Fatal(err)
	}
	if c.Disposition != apitypes.DispositionBlocked || len(c.Findings) != 1 || c.Findings[0] != fmt.Sprintf("tests: %q exited 1", test) {
		t.Errorf("failing candidate: %s %q", c.Disposition, c.Findings)
	}
	if _, err := h.m.Decide(ctx, c.ID, apitypes.DispositionApproved, "ann", "ship it"); !errors.Is(err, errdefs.ErrConflict) || !strings.Contains(err.Error(), "exited 1") {
		t.Errorf("approving a blocked candidate: %v, want a refusal naming the failure", err)
	}
	if _, err := h.m.Decide(ctx, c.ID, apitypes.DispositionRejected, "ann", ""); !errors.Is(err, errdefs.ErrInvalid) {
		t.Errorf("a decision without a reason: %v", err)
	}
	if got, err := h.m.Decide(ctx, c.ID, apitypes.DispositionRejected, "ann", "wrong fix"); err != nil || got.Disposition != apitypes.DispositionRejected {
		t.Errorf("reject: %+v, %v", got, err)
	}

	c, err = h.m.Review(ctx, leak.ID, apitypes.ReviewRequest{Test: test})
	if err != nil {
		t.Fatal(err)
	}
	if c.Disposition != apitypes.DispositionBlocked || len(c.Findings) != 1 || !strings.HasPrefix(c.Findings[0], "check: github-token at conf.txt:1:10: ghp_…") {
		t.Errorf("leaking candidate: %s %q", c.Disposition, c.Findings)
	}
	if evs := h.events(leak.ID, "workspace.committed"); len(evs) != 1 || !strings.Contains(evs[0].Detail, `"forced":true`) {
		t.Errorf("the review's commit of a flagged tree is not recorded as forced: %+v", evs)
	}

	// No test command: nothing shows it works.
	h.writeFile(pass.ID, "more.txt", "more\n")
	c, err = h.m.Review(ctx, pass.ID, apitypes.ReviewRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if c.Disposition != apitypes.DispositionBlocked || !strings.Contains(strings.Join(c.Findings, "\n"), "no test command") {
		t.Errorf("a candidate without tests: %s %q", c.Disposition, c.Findings)
	}
	if cs, err := h.m.ListCandidates(ctx, pass.ID); err != nil || len(cs) != 2 || cs[0].ID != c.ID {
		t.Errorf("ListCandidates = %v, %v", cs, err)
	}
	if _, err := h.m.Review(ctx, pass.ID, apitypes.ReviewRequest{Timeout: "soon"}); !errors.Is(err, errdefs.ErrInvalid) {
		t.Errorf("a bad timeout: %v", err)
	}
	if _, err := h.m.Review(ctx, "ws_nope", apitypes.ReviewRequest{}); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("an unknown workspace: %v", err)
	}
}

// TestReviewHostileWorkspace: a workspace whose .git config, hooks and
// attributes try to run commands (hooks, core.sshCommand, a credential
// helper, a clean filter, fsmonitor, a hooks path), through review,
// approval and push: nothing of it runs.
// Each command fails (a required filter or a hook that fails stops git)
// and would leave a file named pwned-* in the git directory it runs for.
func TestReviewHostileWorkspace(t *testing.T) {
	h, _ := sandboxHarness(t)
	ctx := t.Context()
	w := h.create(CreateRequest{Task: "hostile"})
	mark := func(name string) string { return `touch "${GIT_DIR:-.}/pwned-` + name + `"` }
	h.writeFile(w.ID, ".git/config", "[core]\n\trepositoryformatversion = 0\n\thooksPath = .git/evil-hooks\n"+
		"\tsshCommand = sh -c '"+mark("ssh")+"'\n\tfsmonitor = "+mark("fsmonitor")+"\n"+
		"[credential]\n\thelper = !"+mark("credential")+"\n"+
		"[filter \"evil\"]\n\tclean = sh -c '"+mark("filter")+"; exit 1'\n\tsmudge = sh -c '"+mark("smudge")+"; exit 1'\n\trequired = true\n")
	for _, hook := range []string{"pre-commit", "pre-push", "post-commit", "reference-transaction"} {
		for _, dir := range []string{".git/hooks/", ".git/evil-hooks/"} {
			h.writeFile(w.ID, dir+hook, "#!/bin/sh\n"+mark("hook-"+hook)+"\nexit 1\n")
		}
	}
	h.writeFile(w.ID, ".gitattributes", "* filter=evil\n")
	h.writeFile(w.ID, "fix.txt", "fixed\n")
	// (A remote's own hooks are the remote's: a push to a repository on
	// the host runs them, as any push there would.)
	c, err := h.m.Review(ctx, w.ID, apitypes.ReviewRequest{Test: "grep -qx fixed fix.txt"})
	if err != nil {
		t.Fatal(err)
	}
	if c.Disposition != apitypes.DispositionReady {
		t.Fatalf("the hostile workspace's candidate: %s %q", c.Disposition, c.Findings)
	}
	if _, err := h.m.Decide(ctx, c.ID, apitypes.DispositionApproved, "ann", "ok"); err != nil {
		t.Fatal(err)
	}
	if _, err := h.m.Push(ctx, w.ID); err != nil {
		t.Fatal(err)
	}
	branch, err := h.m.pushBranch(ctx, w)
	if err != nil {
		t.Fatal(err)
	}
	if got := testutil.Git(t, h.src.Dir, "show", branch+":fix.txt"); got != "fixed" {
		t.Errorf("the pushed fix.txt = %q", got)
	}
	// Then a .git/config that is a link to a root-only host file, and a
	// branch whose name holds shell metacharacters: a second round.
	files := h.files(w)
	if err := os.Remove(filepath.Join(files, ".git", "config")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/etc/shadow", filepath.Join(files, ".git", "config")); err != nil {
		t.Fatal(err)
	}
	evil := "x;touch${IFS}pwned-branch"
	h.writeFile(w.ID, ".git/refs/heads/"+evil, c.Commit+"\n")
	h.writeFile(w.ID, ".git/HEAD", "ref: refs/heads/"+evil+"\n")
	h.writeFile(w.ID, "fix.txt", "fixed again\n")
	c, err = h.m.Review(ctx, w.ID, apitypes.ReviewRequest{Test: "grep -qx 'fixed again' fix.txt"})
	if err != nil || c.Disposition != apitypes.DispositionReady {
		t.Fatalf("the second candidate: %+v, %v", c, err)
	}
	if _, err := h.m.Decide(ctx, c.ID, apitypes.DispositionApproved, "ann", "ok"); err != nil {
		t.Fatal(err)
	}
	if _, err := h.m.Push(ctx, w.ID); err != nil {
		t.Fatal(err)
	}
	if got := testutil.Git(t, h.src.Dir, "show", branch+":fix.txt"); got != "fixed again" {
		t.Errorf("the second push's fix.txt = %q", got)
	}
	var found []string
	for _, root := range []string{h.data} {
		filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
			if err == nil && strings.HasPrefix(d.Name(), "pwned-") {
				found = append(found, p)
			}
			return nil
		})
	}
	if len(found) > 0 {
		t.Errorf("commands of the hostile workspace ran on the host: %q", found)
	}
}

// TestReviewRepoConfig: with no commands in the request, review takes them
// from the repository's .agentbox.yaml as of the base commit: an agent's
// edit of that file in the workspace changes nothing.
func TestReviewRepoConfig(t *testing.T) {
	h, _ := sandboxHarness(t)
	ctx := t.Context()
	src := testutil.NewRepo(t, map[string]string{
		".agentbox.yaml": "review:\n  test: grep -qx fixed fix.txt\n  regress: test -f README.md\n  timeout: 2m\n",
		"README.md":      "hi\n",
	})
	r, _, err := h.m.AddRepo(ctx, src.Dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	w := h.create(CreateRequest{Repo: r.ID})
	// The agent makes its own file say every test passes.
	h.writeFile(w.ID, ".agentbox.yaml", "review:\n  test: \"true\"\n")
	h.writeFile(w.ID, "fix.txt", "not yet\n")
	c, err := h.m.Review(ctx, w.ID, apitypes.ReviewRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if c.Evidence.CommandsFrom != ".agentbox.yaml at "+w.BaseCommit || c.Evidence.Tests == nil || c.Evidence.Tests.Command != "grep -qx fixed fix.txt" {
		t.Fatalf("commands from %q: tests %+v", c.Evidence.CommandsFrom, c.Evidence.Tests)
	}
	if c.Disposition != apitypes.DispositionBlocked || c.Evidence.Regress == nil || !c.Evidence.Regress.Passed {
		t.Errorf("candidate: %s %q, regress %+v", c.Disposition, c.Findings, c.Evidence.Regress)
	}
	h.writeFile(w.ID, "fix.txt", "fixed\n")
	if c, err = h.m.Review(ctx, w.ID, apitypes.ReviewRequest{}); err != nil || c.Disposition != apitypes.DispositionReady {
		t.Errorf("after the fix: %+v, %v", c.Findings, err)
	}
	// The request's commands win over the file.
	if c, err = h.m.Review(ctx, w.ID, apitypes.ReviewRequest{Test: "false"}); err != nil || c.Evidence.CommandsFrom != "request" || c.Disposition != apitypes.DispositionBlocked {
		t.Errorf("a request's command: from %q, %s, %v", c.Evidence.CommandsFrom, c.Disposition, err)
	}
}

// TestPushBranchTemplate: push_branch names the branch; a template that
// gives no valid branch is refused before anything is pushed.
func TestPushBranchTemplate(t *testing.T) {
	h, _ := sandboxHarness(t)
	ctx := t.Context()
	w := h.create(CreateRequest{Task: "Speed up parsing!"})
	for tmpl, want := range map[string]string{
		"":                      "agentbox/speed-up-parsing/" + w.ID,
		"bots/{repo}/{ws}":      "bots/" + w.RepoID + "/" + w.ID,
		"x/{task}/{ws}":         "x/speed-up-parsing/" + w.ID,
		"agentbox/{ws}..{task}": "",
	} {
		h.m.cfg.PushBranch = tmpl
		got, err := h.m.pushBranch(ctx, w)
		if want == "" {
			if !errors.Is(err, errdefs.ErrInvalid) {
				t.Errorf("template %q: %q, %v; want ErrInvalid", tmpl, got, err)
			}
			continue
		}
		if err != nil || got != want {
			t.Errorf("template %q: %q, %v; want %q", tmpl, got, err, want)
		}
	}
	h.m.cfg.PushBranch = ""
	noTask := h.create(CreateRequest{})
	if got, err := h.m.pushBranch(ctx, noTask); err != nil || got != "agentbox/"+noTask.ID {
		t.Errorf("without a task: %q, %v", got, err)
	}
}
