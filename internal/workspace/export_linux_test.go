package workspace

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentbox/agentbox/internal/errdefs"
	"github.com/agentbox/agentbox/internal/testutil"
)

// TestExport: a patch series and a bundle, each applied by plain git in a
// clone of the source at the base, give exactly the workspace's files; a
// HEAD made inside the sandbox is exported as one change without the host
// reading the sandbox's objects; nothing to export is said so.
func TestExport(t *testing.T) {
	ctx := t.Context()
	g, fx := hostGit(t)
	author := Author{Name: "A", Email: "a@example.invalid"}

	if p, e, err := g.Patch(ctx, fx.commit, author); err != nil || len(p) != 0 || e.Tip != fx.commit {
		t.Errorf("Patch of an unchanged workspace = %q, %+v, %v", p, e, err)
	}
	if _, _, err := g.Bundle(ctx, fx.commit, author); !errors.Is(err, errdefs.ErrConflict) {
		t.Errorf("Bundle of an unchanged workspace = %v, want ErrConflict", err)
	}

	mustWrite(t, filepath.Join(g.Files, "README.md"), "committed\n")
	sha, err := g.Commit(ctx, "host commit", author, testUID, testGID, nil)
	if err != nil {
		t.Fatal(err)
	}
	mustWrite(t, filepath.Join(g.Files, "new dir", "untracked.txt"), "uncommitted\n")
	os.Remove(filepath.Join(g.Files, "docs", "x.txt"))

	// clone is the source at the base, as a recipient has it.
	clone := func(t *testing.T) string {
		dir := filepath.Join(t.TempDir(), "clone")
		testutil.Git(t, "", "clone", "-q", fx.src.Dir, dir)
		testutil.Git(t, dir, "checkout", "-q", fx.commit)
		return dir
	}
	same := func(t *testing.T, dir string) {
		t.Helper()
		for p, want := range map[string]string{"README.md": "committed\n", "new dir/untracked.txt": "uncommitted\n"} {
			if b, err := os.ReadFile(filepath.Join(dir, p)); err != nil || string(b) != want {
				t.Errorf("%s: %q, %v; want %q", p, b, err, want)
			}
		}
		if _, err := os.Stat(filepath.Join(dir, "docs", "x.txt")); !os.IsNotExist(err) {
			t.Errorf("docs/x.txt is still there: %v", err)
		}
	}

	t.Run("patch", func(t *testing.T) {
		p, e, err := g.Patch(ctx, fx.commit, author)
		if err != nil {
			t.Fatal(err)
		}
		if e.Head != sha || !e.Uncommitted || e.Foreign || e.Branch != "work" {
			t.Errorf("export = %+v, want head %s with uncommitted changes on work", e, sha)
		}
		if n := strings.Count(string(p), "\nSubject: [PATCH "); n != 2 || !strings.Contains(string(p), "[PATCH 1/2] host commit") || !strings.Contains(string(p), "[PATCH 2/2] Uncommitted changes of workspace") {
			t.Errorf("the patch holds %d messages:\n%s", n, p)
		}
		dir := clone(t)
		mbox := filepath.Join(t.TempDir(), "result.mbox")
		if err := os.WriteFile(mbox, p, 0o600); err != nil {
			t.Fatal(err)
		}
		testutil.Git(t, dir, "-c", "user.name=R", "-c", "user.email=r@example.invalid", "am", "-q", mbox)
		same(t, dir)
		if got := testutil.Git(t, dir, "log", "--format=%s", "-2"); got != "Uncommitted changes of workspace ws\nhost commit" {
			t.Errorf("git log after git am = %q", got)
		}
	})

	t.Run("bundle", func(t *testing.T) {
		b, e, err := g.Bundle(ctx, fx.commit, author)
		if err != nil {
			t.Fatal(err)
		}
		file := filepath.Join(t.TempDir(), "result.bundle")
		if err := os.WriteFile(file, b, 0o600); err != nil {
			t.Fatal(err)
		}
		dir := clone(t)
		testutil.Git(t, dir, "bundle", "verify", "-q", file)
		testutil.Git(t, dir, "fetch", "-q", file, "work:from-bundle")
		if got := testutil.Git(t, dir, "rev-parse", "from-bundle"); got != e.Tip {
			t.Errorf("the bundle's work = %s, want the tip %s", got, e.Tip)
		}
		testutil.Git(t, dir, "checkout", "-q", "from-bundle")
		same(t, dir)
		// hostgit keeps no ref of its own after.
		if refs := testutil.Git(t, "", "--git-dir", HostGitDir(g.Dir), "for-each-ref"); refs != "" {
			t.Errorf("hostgit refs after a bundle: %q", refs)
		}
	})

	t.Run("commits made inside the sandbox", func(t *testing.T) {
		// The sandbox's own git commits everything; the host has no such
		// object and never reads the sandbox's store: one change, from the
		// last commit the host knows.
		testutil.Git(t, g.Files, "-c", "safe.directory=*", "-c", "user.name=S", "-c", "user.email=s@example.invalid", "add", "-A")
		testutil.Git(t, g.Files, "-c", "safe.directory=*", "-c", "user.name=S", "-c", "user.email=s@example.invalid", "commit", "-q", "-m", "inside")
		p, e, err := g.Patch(ctx, fx.commit, author)
		if err != nil {
			t.Fatal(err)
		}
		if !e.Foreign || e.Head != fx.commit || !e.Uncommitted {
			t.Errorf("export = %+v, want a foreign HEAD exported from the base", e)
		}
		if n := strings.Count(string(p), "\nSubject: [PATCH"); n != 1 || !strings.Contains(string(p), "Subject: [PATCH] Changes of workspace") {
			t.Errorf("the patch of a foreign HEAD:\n%s", p)
		}
		dir := clone(t)
		mbox := filepath.Join(t.TempDir(), "result.mbox")
		os.WriteFile(mbox, p, 0o600)
		testutil.Git(t, dir, "-c", "user.name=R", "-c", "user.email=r@example.invalid", "am", "-q", mbox)
		same(t, dir)
	})

	t.Run("hostile branch names", func(t *testing.T) {
		// Metacharacters are legal in a git branch: the name is only ever
		// an argument, never a shell word.
		mustWrite(t, filepath.Join(g.Files, ".git", "HEAD"), "ref: refs/heads/a;touch${IFS}pwned\n")
		b, e, err := g.Bundle(ctx, fx.commit, author)
		if err != nil || e.Branch != "a;touch${IFS}pwned" {
			t.Fatalf("Bundle on a branch with metacharacters = %+v, %v", e, err)
		}
		file := filepath.Join(t.TempDir(), "b.bundle")
		os.WriteFile(file, b, 0o600)
		if heads := testutil.Git(t, "", "bundle", "list-heads", file); !strings.HasSuffix(heads, " refs/heads/a;touch${IFS}pwned") {
			t.Errorf("bundle heads = %q", heads)
		}
		for _, dir := range []string{g.Files, g.Dir, "/"} {
			if _, err := os.Stat(filepath.Join(dir, "pwned")); err == nil {
				t.Errorf("%s/pwned exists: a branch name ran", dir)
			}
		}
		// One git refuses becomes agentbox/export.
		mustWrite(t, filepath.Join(g.Files, ".git", "HEAD"), "ref: refs/heads/-x\n")
		b, e, err = g.Bundle(ctx, fx.commit, author)
		if err != nil || e.Branch != "agentbox/export" {
			t.Fatalf("Bundle on branch -x = %+v, %v", e, err)
		}
		os.WriteFile(file, b, 0o600)
		if heads := testutil.Git(t, "", "bundle", "list-heads", file); !strings.HasSuffix(heads, " refs/heads/agentbox/export") {
			t.Errorf("bundle heads = %q", heads)
		}
	})
}

// A HEAD on a branch with no commit yet: the candidate is the files on the
// base, in hostgit, not a root commit on that branch.
func TestCandidateUnbornBranch(t *testing.T) {
	ctx := t.Context()
	g, fx := hostGit(t)
	author := Author{Name: "A", Email: "a@example.invalid"}
	mustWrite(t, filepath.Join(g.Files, ".git", "HEAD"), "ref: refs/heads/fresh\n")
	mustWrite(t, filepath.Join(g.Files, "new.txt"), "new\n")
	e, err := g.Candidate(ctx, fx.commit, "cand", author, testUID, testGID, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !e.Unborn || e.Tip == fx.commit {
		t.Fatalf("export %+v", e)
	}
	if parent := testutil.Git(t, "", "--git-dir", HostGitDir(g.Dir), "rev-parse", e.Tip+"^"); parent != fx.commit {
		t.Errorf("the candidate's parent is %s, want the base %s", parent, fx.commit)
	}
	if _, err := os.Stat(filepath.Join(g.Files, ".git", "refs", "heads", "fresh")); !os.IsNotExist(err) {
		t.Errorf("the unborn branch was written: %v", err)
	}
}
