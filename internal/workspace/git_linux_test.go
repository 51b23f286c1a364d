package workspace

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/internal/errdefs"
	"github.com/agentbox/agentbox/internal/testutil"
)

const (
	shaA = "0123456789abcdef0123456789abcdef01234567"
	shaB = "89abcdef0123456789abcdef0123456789abcdef"
)

func TestHead(t *testing.T) {
	outside := filepath.Join(t.TempDir(), "outside")
	mustWrite(t, outside, shaB+"\n")
	tests := []struct {
		name         string
		setup        func(t *testing.T, gitDir string)
		branch, head string
		bad          bool
	}{
		{name: "branch", setup: func(t *testing.T, g string) {
			mustWrite(t, g+"/HEAD", "ref: refs/heads/main\n")
			mustWrite(t, g+"/refs/heads/main", shaA+"\n")
		}, branch: "main", head: shaA},
		{name: "nested branch", setup: func(t *testing.T, g string) {
			mustWrite(t, g+"/HEAD", "ref: refs/heads/agentbox/ws_1\n")
			mustWrite(t, g+"/refs/heads/agentbox/ws_1", shaA)
		}, branch: "agentbox/ws_1", head: shaA},
		{name: "packed", setup: func(t *testing.T, g string) {
			mustWrite(t, g+"/HEAD", "ref: refs/heads/main\n")
			mustWrite(t, g+"/packed-refs", "# pack-refs with: peeled fully-peeled sorted\n"+shaB+" refs/heads/other\n"+shaA+" refs/heads/main\n")
		}, branch: "main", head: shaA},
		{name: "unborn", setup: func(t *testing.T, g string) {
			mustWrite(t, g+"/HEAD", "ref: refs/heads/main\n")
		}, branch: "main"},
		{name: "detached", setup: func(t *testing.T, g string) {
			mustWrite(t, g+"/HEAD", shaA+"\n")
		}, head: shaA},
		{name: "ref escapes", setup: func(t *testing.T, g string) {
			mustWrite(t, g+"/HEAD", "ref: refs/heads/../../config\n")
		}, bad: true},
		{name: "not a branch", setup: func(t *testing.T, g string) {
			mustWrite(t, g+"/HEAD", "ref: refs/tags/v1\n")
		}, bad: true},
		{name: "garbage", setup: func(t *testing.T, g string) {
			mustWrite(t, g+"/HEAD", "hello\n")
		}, bad: true},
		{name: "missing", setup: func(t *testing.T, g string) {}, bad: true},
		{name: "HEAD links out", setup: func(t *testing.T, g string) {
			symlink(t, outside, g+"/HEAD")
		}, bad: true},
		{name: "HEAD is a FIFO", setup: func(t *testing.T, g string) {
			if err := unix.Mkfifo(g+"/HEAD", 0o644); err != nil {
				t.Fatal(err)
			}
		}, bad: true},
		{name: "HEAD is huge", setup: func(t *testing.T, g string) {
			mustWrite(t, g+"/HEAD", "ref: refs/heads/main\n"+strings.Repeat("x", 2<<20))
		}, bad: true},
		{name: "branch ref links out", setup: func(t *testing.T, g string) {
			mustWrite(t, g+"/HEAD", "ref: refs/heads/main\n")
			symlink(t, outside, g+"/refs/heads/main")
		}, branch: "main"},
		{name: ".git links out", setup: func(t *testing.T, g string) {
			os.RemoveAll(g)
			real := filepath.Join(t.TempDir(), "real")
			mustWrite(t, real+"/HEAD", shaA+"\n")
			symlink(t, real, g)
		}, bad: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			files := t.TempDir()
			gitDir := filepath.Join(files, ".git")
			if err := os.MkdirAll(filepath.Join(gitDir, "refs", "heads"), 0o755); err != nil {
				t.Fatal(err)
			}
			tt.setup(t, gitDir)
			branch, head, err := within(t, func() (headResult, error) {
				b, c, err := Head(files)
				return headResult{b, c}, err
			})
			if tt.bad {
				if err == nil {
					t.Errorf("Head = %q, %q; want an error", branch, head)
				}
				return
			}
			if err != nil || branch != tt.branch || head != tt.head {
				t.Errorf("Head = %q, %q, %v; want %q, %q", branch, head, err, tt.branch, tt.head)
			}
		})
	}
}

type headResult struct{ branch, head string }

// within fails the test when Head blocks (on a FIFO) for 10 seconds.
func within(t *testing.T, f func() (headResult, error)) (string, string, error) {
	t.Helper()
	type res struct {
		r   headResult
		err error
	}
	ch := make(chan res, 1)
	go func() {
		r, err := f()
		ch <- res{r, err}
	}()
	timer := time.NewTimer(10 * time.Second)
	defer timer.Stop()
	select {
	case r := <-ch:
		return r.r.branch, r.r.head, r.err
	case <-timer.C:
		t.Fatal("Head blocked")
		return "", "", nil
	}
}

func symlink(t *testing.T, target, link string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(link), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
}

func TestValidBranch(t *testing.T) {
	valid := []string{"main", "feature/x", "agentbox/ws_k3j9a0c2mq7p", "fix-1.2", "UPPER_case", "a/b/c/d"}
	invalid := []string{"", "-x", "--force", "a..b", "has space", "tab\there", "HEAD", "refs/heads/x",
		"x.lock", "a~b", "a^b", "a:b", "a?b", "a*b", "a[b", `a\b`, "/x", "x/", "x.", "a//b", "a@{b",
		".hidden", "a/.b", "nul\x00", strings.Repeat("b", 201)}
	for _, b := range valid {
		if err := ValidBranch(t.Context(), b); err != nil {
			t.Errorf("ValidBranch(%q) = %v, want nil", b, err)
		}
	}
	for _, b := range invalid {
		if err := ValidBranch(t.Context(), b); !errors.Is(err, errdefs.ErrInvalid) {
			t.Errorf("ValidBranch(%q) = %v, want ErrInvalid", b, err)
		}
	}
}

func TestRefuseFIFOs(t *testing.T) {
	outside := t.TempDir()
	if err := unix.Mkfifo(filepath.Join(outside, ".gitignore"), 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		fifo    string // path of a FIFO in the files, "" for none
		link    string // a symlink to the outside dir, "" for none
		refused bool
	}{
		{},
		{fifo: "pipe"},
		{fifo: "a/b/pipe"},
		{fifo: ".git/pipe"},
		{fifo: ".git/hooks/pre-commit"},
		{fifo: "gitignore"},
		{fifo: ".gitignore", refused: true},
		{fifo: "a/b/.gitignore", refused: true},
		{fifo: "src/.gitattributes", refused: true},
		{fifo: ".gitmodules", refused: true},
		{fifo: "vendor/lib/.git/HEAD", refused: true},
		{fifo: "vendor/lib/.git/refs/heads/main", refused: true},
		{fifo: ".git/modules/lib/HEAD", refused: true},
		{link: "linked"},
	}
	for _, tt := range tests {
		t.Run(tt.fifo+tt.link, func(t *testing.T) {
			dir := t.TempDir()
			files := filepath.Join(dir, "tree")
			mustWrite(t, filepath.Join(files, ".git", "HEAD"), "ref: refs/heads/main\n")
			mustWrite(t, filepath.Join(files, "a", "b", "c.txt"), "c\n")
			if tt.fifo != "" {
				p := filepath.Join(files, tt.fifo)
				os.MkdirAll(filepath.Dir(p), 0o755)
				if err := unix.Mkfifo(p, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			if tt.link != "" {
				symlink(t, outside, filepath.Join(files, tt.link))
			}
			err := Git{Dir: dir, Files: files}.refuseFIFOs(t.Context())
			if !tt.refused {
				if err != nil {
					t.Errorf("refuseFIFOs = %v, want nil", err)
				}
				return
			}
			if !errors.Is(err, errdefs.ErrConflict) || !strings.Contains(err.Error(), tt.fifo) {
				t.Errorf("refuseFIFOs = %v, want ErrConflict naming %s", err, tt.fifo)
			}
		})
	}
}

// hostGit makes a copy-driver workspace of a fresh repository with its
// host git directory and a branch, as the manager does.
func hostGit(t *testing.T) (Git, *fixture) {
	t.Helper()
	fx := newFixture(t, Copy)
	d, _ := New(Copy)
	dir := fx.create(t, d, "ws")
	g := Git{Dir: dir, Files: d.Files(dir)}
	if err := InitHostGit(t.Context(), dir, fx.repo.Path, filepath.Join(g.Files, ".git", "index")); err != nil {
		t.Fatal(err)
	}
	if err := SetBranch(t.Context(), g.Files, "work", fx.commit, testUID, testGID); err != nil {
		t.Fatal(err)
	}
	return g, fx
}

func TestGitChangesDiffCommit(t *testing.T) {
	ctx := t.Context()
	g, fx := hostGit(t)
	if b, c, err := Head(g.Files); err != nil || b != "work" || c != fx.commit {
		t.Fatalf("Head after SetBranch = %q, %q, %v", b, c, err)
	}
	if cs, err := g.Changes(ctx, fx.commit); err != nil || len(cs) != 0 {
		t.Errorf("Changes of a new workspace = %v, %v", cs, err)
	}
	mustWrite(t, filepath.Join(g.Files, "README.md"), "changed\n")
	mustWrite(t, filepath.Join(g.Files, "added.txt"), "added\n")
	os.Remove(filepath.Join(g.Files, "docs", "x.txt"))
	mustWrite(t, filepath.Join(g.Files, ".agentbox-tmp-123"), "a write cut short\n")
	want := []Change{{Status: "M", Path: "README.md"}, {Status: "A", Path: "added.txt"}, {Status: "D", Path: "docs/x.txt"}}
	cs, err := g.Changes(ctx, fx.commit)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, cs); diff != "" {
		t.Errorf("Changes (-want +got):\n%s", diff)
	}
	small := g
	small.MaxDiffBytes = 64
	if _, err := small.Diff(ctx, fx.commit); !errors.Is(err, errdefs.ErrTooLarge) {
		t.Errorf("Diff over MaxDiffBytes = %v, want ErrTooLarge", err)
	}
	slow := g
	slow.Timeout = time.Nanosecond
	if _, err := slow.Changes(ctx, fx.commit); !errors.Is(err, errdefs.ErrUnavailable) {
		t.Errorf("Changes over the timeout = %v, want ErrUnavailable", err)
	}
	sha, err := g.Commit(ctx, "change", Author{Name: "A", Email: "a@example.invalid"}, testUID, testGID, nil)
	if err != nil {
		t.Fatal(err)
	}
	if b, c, err := Head(g.Files); err != nil || b != "work" || c != sha {
		t.Errorf("Head after Commit = %q, %q, %v; want work at %s", b, c, err, sha)
	}
	if _, err := g.Commit(ctx, "again", Author{Name: "A", Email: "a@example.invalid"}, testUID, testGID, nil); !errors.Is(err, errdefs.ErrConflict) {
		t.Errorf("Commit with nothing new = %v, want ErrConflict", err)
	}
	// The workspace's own git agrees, and the temp file is in no commit.
	if got := testutil.Git(t, g.Files, "-c", "safe.directory=*", "show", "--format=%P", "--name-status", "HEAD"); got != fx.commit+"\n\nM\tREADME.md\nA\tadded.txt\nD\tdocs/x.txt" {
		t.Errorf("git show HEAD = %q", got)
	}
}

// A commit on a detached HEAD moves HEAD itself.
func TestGitCommitDetached(t *testing.T) {
	ctx := t.Context()
	g, fx := hostGit(t)
	mustWrite(t, filepath.Join(g.Files, ".git", "HEAD"), fx.commit+"\n")
	mustWrite(t, filepath.Join(g.Files, "x.txt"), "x\n")
	sha, err := g.Commit(ctx, "detached", Author{Name: "A", Email: "a@example.invalid"}, testUID, testGID, nil)
	if err != nil {
		t.Fatal(err)
	}
	if b, c, err := Head(g.Files); err != nil || b != "" || c != sha {
		t.Errorf("Head = %q, %q, %v; want detached at %s", b, c, err, sha)
	}
	if got := testutil.Git(t, g.Files, "-c", "safe.directory=*", "rev-parse", "refs/heads/work"); got != fx.commit {
		t.Errorf("branch work moved to %s", got)
	}
}

// Commit writes into the workspace's .git through os.Root: a planted link
// is replaced or refused, never written through.
func TestGitCommitFollowsNoLinks(t *testing.T) {
	author := Author{Name: "A", Email: "a@example.invalid"}
	t.Run("branch ref", func(t *testing.T) {
		g, _ := hostGit(t)
		victim := filepath.Join(t.TempDir(), "victim")
		mustWrite(t, victim, "precious\n")
		ref := filepath.Join(g.Files, ".git", "refs", "heads", "work")
		os.Remove(ref)
		symlink(t, victim, ref)
		mustWrite(t, filepath.Join(g.Files, "x.txt"), "x\n")
		sha, err := g.Commit(t.Context(), "x", author, testUID, testGID, nil)
		if err != nil {
			t.Fatal(err)
		}
		if b, _ := os.ReadFile(victim); string(b) != "precious\n" {
			t.Errorf("Commit wrote through the ref's symlink: victim = %q", b)
		}
		if fi, err := os.Lstat(ref); err != nil || !fi.Mode().IsRegular() {
			t.Errorf("ref after Commit: %v, %v", fi, err)
		}
		if b, _ := os.ReadFile(ref); strings.TrimSpace(string(b)) != sha {
			t.Errorf("ref = %q, want %s", b, sha)
		}
	})
	t.Run("objects dir", func(t *testing.T) {
		g, _ := hostGit(t)
		victim := t.TempDir()
		objects := filepath.Join(g.Files, ".git", "objects")
		if err := os.RemoveAll(objects); err != nil {
			t.Fatal(err)
		}
		symlink(t, victim, objects)
		mustWrite(t, filepath.Join(g.Files, "x.txt"), "x\n")
		if _, err := g.Commit(t.Context(), "x", author, testUID, testGID, nil); err == nil {
			t.Error("Commit succeeded with .git/objects linked out of the workspace")
		}
		if left, _ := os.ReadDir(victim); len(left) != 0 {
			t.Errorf("Commit wrote %d entries through the objects link", len(left))
		}
	})
	t.Run("index", func(t *testing.T) {
		g, _ := hostGit(t)
		victim := filepath.Join(t.TempDir(), "victim")
		mustWrite(t, victim, "precious\n")
		index := filepath.Join(g.Files, ".git", "index")
		os.Remove(index)
		symlink(t, victim, index)
		mustWrite(t, filepath.Join(g.Files, "x.txt"), "x\n")
		if _, err := g.Commit(t.Context(), "x", author, testUID, testGID, nil); err != nil {
			t.Fatal(err)
		}
		if b, _ := os.ReadFile(victim); string(b) != "precious\n" {
			t.Errorf("Commit wrote through the index symlink: victim = %q", b)
		}
	})
}

// A fork's host git directory shares the parent's index and exclude list
// until either side changes them; a change on one side leaves the other's
// as it was (both are replaced by rename, never written in place).
func TestForkHostGit(t *testing.T) {
	ctx := t.Context()
	author := Author{Name: "A", Email: "a@example.invalid"}
	parent, fx := hostGit(t)
	if err := parent.Exclude("/parent-before.log"); err != nil {
		t.Fatal(err)
	}
	mustWrite(t, filepath.Join(parent.Files, "README.md"), "parent before the fork\n")
	base, err := parent.Commit(ctx, "before the fork", author, testUID, testGID, nil)
	if err != nil {
		t.Fatal(err)
	}
	d, _ := New(Copy)
	dir := filepath.Join(fx.top, "fork")
	if err := os.Mkdir(dir, 0o711); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { Remove(context.Background(), d, dir) })
	if err := d.Fork(ctx, parent.Dir, dir, Source{Branch: "fork", Commit: base, UID: testUID, GID: testGID}); err != nil {
		t.Fatal(err)
	}
	if err := ForkHostGit(ctx, parent.Dir, dir, fx.repo.Path); err != nil {
		t.Fatal(err)
	}
	fork := Git{Dir: dir, Files: d.Files(dir)}
	index := func(g Git) string { return filepath.Join(HostGitDir(g.Dir), "index") }
	exclude := func(g Git) string { return filepath.Join(HostGitDir(g.Dir), "info", "exclude") }
	if mustRead(t, index(fork)) != mustRead(t, index(parent)) || mustRead(t, exclude(fork)) != mustRead(t, exclude(parent)) {
		t.Fatal("the fork's index or exclude list is not the parent's")
	}
	// Changes stages the files first, which may rewrite the index.
	if cs, err := fork.Changes(ctx, base); err != nil || len(cs) != 0 {
		t.Errorf("Changes of a new fork = %v, %v", cs, err)
	}
	forkIndex := mustRead(t, index(fork))

	// The parent changes both: the fork's stay as they were.
	mustWrite(t, filepath.Join(parent.Files, "parent.txt"), "parent\n")
	if _, err := parent.Commit(ctx, "parent after the fork", author, testUID, testGID, nil); err != nil {
		t.Fatal(err)
	}
	if err := parent.Exclude("/parent-after.log"); err != nil {
		t.Fatal(err)
	}
	if mustRead(t, index(fork)) != forkIndex {
		t.Error("the parent's commit changed the fork's index")
	}
	if ex := mustRead(t, exclude(fork)); !strings.Contains(ex, "/parent-before.log\n") || strings.Contains(ex, "/parent-after.log") {
		t.Errorf("the fork's exclude list after the parent's change: %q", ex)
	}

	// The fork changes both: the parent's stay as they were.
	parentIndex, parentExclude := mustRead(t, index(parent)), mustRead(t, exclude(parent))
	mustWrite(t, filepath.Join(fork.Files, "fork.txt"), "fork\n")
	mustWrite(t, filepath.Join(fork.Files, "fork.log"), "excluded\n")
	if err := fork.Exclude("/fork.log"); err != nil {
		t.Fatal(err)
	}
	want := []Change{{Status: "A", Path: "fork.txt"}}
	if cs, err := fork.Changes(ctx, base); err != nil || !slices.Equal(cs, want) {
		t.Errorf("Changes of the fork = %v, %v; want %v", cs, err, want)
	}
	if _, err := fork.Commit(ctx, "fork", author, testUID, testGID, nil); err != nil {
		t.Fatal(err)
	}
	if mustRead(t, index(parent)) != parentIndex || mustRead(t, exclude(parent)) != parentExclude {
		t.Error("the fork's commit or exclude changed the parent's")
	}
	if got := testutil.Git(t, parent.Files, "-c", "safe.directory=*", "show", "--format=", "--name-only", "HEAD"); got != "parent.txt" {
		t.Errorf("the parent's last commit holds %q", got)
	}
	if got := testutil.Git(t, fork.Files, "-c", "safe.directory=*", "show", "--format=", "--name-only", "HEAD"); got != "fork.txt" {
		t.Errorf("the fork's commit holds %q", got)
	}
}

func mustRead(t *testing.T, p string) string {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
