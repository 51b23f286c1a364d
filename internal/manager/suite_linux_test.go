package manager

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/internal/errdefs"
	"github.com/agentbox/agentbox/internal/fileapi"
	"github.com/agentbox/agentbox/internal/store"
	"github.com/agentbox/agentbox/internal/testutil"
	"github.com/agentbox/agentbox/internal/workspace"
)

// The driver conformance suite: every workspace driver must pass all of
// it, through the manager, with real git, SQLite and mounts.

func TestOverlay(t *testing.T) { runDriverSuite(t, workspace.Overlay) }
func TestCopy(t *testing.T)    { runDriverSuite(t, workspace.Copy) }

// The suite again with every workspace in a quota volume of its own.
func TestOverlayQuota(t *testing.T) { withSuiteQuota(t); runDriverSuite(t, workspace.Overlay) }
func TestCopyQuota(t *testing.T)    { withSuiteQuota(t); runDriverSuite(t, workspace.Copy) }

// suiteQuota, when set, is the default disk quota of the harnesses that
// newHarness makes. Only the non-parallel top-level tests above set it,
// and top-level tests that are not parallel never overlap.
var suiteQuota int64

// layoutDir is where the driver keeps w's layout (upper, tree): inside
// its quota volume when it has one.
func layoutDir(w store.Workspace) string {
	if w.DiskQuota > 0 {
		return filepath.Join(w.Dir, "vol")
	}
	return w.Dir
}

func withSuiteQuota(t *testing.T) {
	suiteQuota = 64 << 20
	t.Cleanup(func() { suiteQuota = 0 })
}

func runDriverSuite(t *testing.T, driver string) {
	requireDriver(t, driver)
	tests := []struct {
		name string
		run  func(t *testing.T, driver string)
	}{
		{"Create", testCreate},
		{"AgentGit", testAgentGit},
		{"GitThroughBindMount", testGitThroughBindMount},
		{"FileAPI", testFileAPI},
		{"StatusDiff", testStatusDiff},
		{"Commit", testCommit},
		{"Fork", testFork},
		{"Remove", testRemove},
		{"RemountAfterRestart", testRemountAfterRestart},
		{"ReattachOnUse", testReattachOnUse},
		{"FailureInjection", testFailureInjection},
		{"CrashLeftovers", testCrashLeftovers},
		{"BadInput", testBadInput},
		{"RemoveRepo", testRemoveRepo},
		{"HostileConfig", testHostileConfig},
		{"HostileLinksAndFIFOs", testHostileLinksAndFIFOs},
		{"Empty", testEmpty},
		{"Upload", testUpload},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			tt.run(t, driver)
		})
	}
}

var ignoreTimes = cmpopts.IgnoreFields(store.Workspace{}, "CreatedAt", "UpdatedAt")

// wantTree is the content of the source repo at a commit: v1Files at v1,
// v1Files updated by mainFiles at main. A missing file maps to "".
func wantTree(atMain bool) map[string]string {
	want := map[string]string{"second.txt": ""}
	for p, c := range v1Files {
		want[p] = c
	}
	if atMain {
		for p, c := range mainFiles {
			want[p] = c
		}
	}
	return want
}

func checkTree(t *testing.T, files string, want map[string]string) {
	t.Helper()
	for p, c := range want {
		got, err := os.ReadFile(filepath.Join(files, p))
		switch {
		case c == "" && !os.IsNotExist(err):
			t.Errorf("%s: exists (err %v), want absent", p, err)
		case c != "" && err != nil:
			t.Errorf("%s: %v", p, err)
		case c != "" && string(got) != c:
			t.Errorf("%s = %q, want %q", p, got, c)
		}
	}
}

// checkNoHostPaths asserts the workspace's .git is a self-contained
// repository: nothing outside objects/ names the data dir or alternates,
// and objects/info/alternates does not exist.
func checkNoHostPaths(t *testing.T, h *harness, files string) {
	t.Helper()
	gitDir := filepath.Join(files, ".git")
	fi, err := os.Lstat(gitDir)
	if err != nil || !fi.IsDir() {
		t.Fatalf(".git is not a directory: %v, %v", fi, err)
	}
	if hits := grepTree(t, gitDir, []string{"objects"}, h.data, "alternates"); len(hits) > 0 {
		t.Errorf("the workspace's .git refers to the host: %q", hits)
	}
	if _, err := os.Lstat(filepath.Join(gitDir, "objects", "info", "alternates")); !os.IsNotExist(err) {
		t.Errorf("objects/info/alternates exists (err %v), want none", err)
	}
}

func owner(t *testing.T, p string) (uid, gid uint32) {
	t.Helper()
	fi, err := os.Lstat(p)
	if err != nil {
		t.Fatal(err)
	}
	st := fi.Sys().(*syscall.Stat_t)
	return st.Uid, st.Gid
}

func checkOwner(t *testing.T, p string) {
	t.Helper()
	if uid, gid := owner(t, p); uid != testUID || gid != testGID {
		t.Errorf("%s is owned by %d:%d, want %d:%d", p, uid, gid, testUID, testGID)
	}
}

// 1. Create at every kind of ref, with and without a branch name.
func testCreate(t *testing.T, driver string) {
	h := newHarness(t, driver)
	v1, head := h.src.Commits[0], h.src.Commits[1]
	tests := []struct {
		name       string
		req        CreateRequest
		wantCommit string
		wantRef    string
		wantBranch string // empty: agentbox/<id>
	}{
		{name: "default branch", req: CreateRequest{}, wantCommit: head, wantRef: "main"},
		{name: "branch", req: CreateRequest{Ref: "main"}, wantCommit: head, wantRef: "main"},
		{name: "tag", req: CreateRequest{Ref: "v1"}, wantCommit: v1, wantRef: "v1"},
		{name: "full commit", req: CreateRequest{Ref: v1}, wantCommit: v1, wantRef: v1},
		{name: "abbreviated commit", req: CreateRequest{Ref: v1[:9]}, wantCommit: v1, wantRef: v1[:9]},
		{name: "own branch at tag", req: CreateRequest{Ref: "v1", Branch: "feature/fix-1"}, wantCommit: v1, wantRef: "v1", wantBranch: "feature/fix-1"},
		{name: "own branch at default", req: CreateRequest{Branch: "task-2", Task: "task two"}, wantCommit: head, wantRef: "main", wantBranch: "task-2"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := h.sub(t)
			w := h.create(tt.req)
			branch := tt.wantBranch
			if branch == "" {
				branch = "agentbox/" + w.ID
			}
			want := store.Workspace{ID: w.ID, RepoID: h.repo.ID, PristineID: w.PristineID, Ref: tt.wantRef,
				BaseCommit: tt.wantCommit, Branch: branch, Task: tt.req.Task, Driver: driver,
				Dir: filepath.Join(h.data, "workspaces", w.ID), State: store.WorkspaceReady, DiskQuota: suiteQuota}
			if diff := cmp.Diff(want, w, ignoreTimes); diff != "" {
				t.Errorf("CreateWorkspace (-want +got):\n%s", diff)
			}
			if got, err := h.m.GetWorkspace(t.Context(), w.ID); err != nil {
				t.Fatal(err)
			} else if diff := cmp.Diff(want, got, ignoreTimes); diff != "" {
				t.Errorf("GetWorkspace (-want +got):\n%s", diff)
			}
			if (w.PristineID != "") != (driver == workspace.Overlay) {
				t.Errorf("PristineID = %q with driver %s", w.PristineID, driver)
			}
			files := h.files(w)
			if got := isMounted(t, files); got != (driver == workspace.Overlay) {
				t.Errorf("files mounted = %v with driver %s", got, driver)
			}
			checkTree(t, files, wantTree(tt.wantCommit == head))
			checkOwner(t, files)
			checkOwner(t, filepath.Join(files, "README.md"))
			if got := h.agentGit(files, "rev-parse", "--abbrev-ref", "HEAD"); got != branch {
				t.Errorf("checked out branch = %q, want %q", got, branch)
			}
			if got := h.agentGit(files, "rev-parse", "HEAD", "refs/heads/"+branch); got != tt.wantCommit+"\n"+tt.wantCommit {
				t.Errorf("HEAD and branch = %q, want %s twice", got, tt.wantCommit)
			}
			if got := h.agentGit(files, "status", "--porcelain"); got != "" {
				t.Errorf("git status after create = %q, want clean", got)
			}
			if n := len(h.events(w.ID, "workspace.created")); n != 1 {
				t.Errorf("%d workspace.created events, want 1", n)
			}
		})
	}
}

// 2. Plain git inside the workspace works as an agent uses it.
func testAgentGit(t *testing.T, driver string) {
	h := newHarness(t, driver)
	w := h.create(CreateRequest{})
	files := h.files(w)
	checkNoHostPaths(t, h, files)
	if got := h.agentGit(files, "status", "--porcelain"); got != "" {
		t.Fatalf("git status after create = %q, want clean", got)
	}
	if err := os.WriteFile(filepath.Join(files, "README.md"), []byte("hello\nagent\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(files, "new"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(files, "new", "agent.txt"), []byte("made by the agent\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(files, "docs", "guide.txt")); err != nil {
		t.Fatal(err)
	}
	wantStatus := " M README.md\n D docs/guide.txt\n?? new/agent.txt"
	if got := h.agentGit(files, "status", "--porcelain", "--untracked-files=all"); got != wantStatus {
		t.Errorf("git status =\n%s\nwant\n%s", got, wantStatus)
	}
	d := h.agentGit(files, "diff")
	for _, s := range []string{"-world", "+agent", "deleted file mode 100644", "-read me first"} {
		if !strings.Contains(d, s) {
			t.Errorf("git diff does not contain %q:\n%s", s, d)
		}
	}
	h.agentGit(files, "add", "-A")
	if got := h.agentGit(files, "diff", "--cached", "--name-status"); got != "M\tREADME.md\nD\tdocs/guide.txt\nA\tnew/agent.txt" {
		t.Errorf("git diff --cached --name-status = %q", got)
	}
	h.agentGit(files, "commit", "-q", "-m", "x")
	log := strings.Split(h.agentGit(files, "log", "--format=%H %s"), "\n")
	if len(log) != 3 || !strings.HasSuffix(log[0], " x") || log[1] != w.BaseCommit+" second" {
		t.Errorf("git log = %q, want x on top of %s second", log, w.BaseCommit)
	}
	if got := h.agentGit(files, "status", "--porcelain"); got != "" {
		t.Errorf("git status after commit = %q, want clean", got)
	}
	if got := h.agentGit(files, "rev-parse", "--abbrev-ref", "HEAD"); got != w.Branch {
		t.Errorf("branch after commit = %q, want %q", got, w.Branch)
	}
	h.agentGit(files, "fsck", "--no-progress")
	checkNoHostPaths(t, h, files)
	// The host sees the agent's work against the base.
	want := []workspace.Change{{Status: "M", Path: "README.md"}, {Status: "D", Path: "docs/guide.txt"}, {Status: "A", Path: "new/agent.txt"}}
	if diff := cmp.Diff(want, h.status(w.ID).Changes); diff != "" {
		t.Errorf("Status after the agent's commit (-want +got):\n%s", diff)
	}
}

// 3. git works when the files are reached through another path, as in a
// sandbox that bind-mounts them at /workspace.
func testGitThroughBindMount(t *testing.T, driver string) {
	h := newHarness(t, driver)
	w := h.create(CreateRequest{})
	h.writeFile(w.ID, "bound.txt", "x\n")
	mnt := t.TempDir()
	if err := unix.Mount(h.files(w), mnt, "", unix.MS_BIND, ""); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Unmount(mnt, unix.MNT_DETACH) })
	if got := h.agentGit(mnt, "status", "--porcelain"); got != "?? bound.txt" {
		t.Errorf("git status through the bind mount = %q", got)
	}
	if got := h.agentGit(mnt, "log", "-1", "--format=%H"); got != w.BaseCommit {
		t.Errorf("git log through the bind mount = %q, want %s", got, w.BaseCommit)
	}
	h.agentGit(mnt, "add", "-A")
	h.agentGit(mnt, "commit", "-q", "-m", "through the bind mount")
	sha := h.agentGit(mnt, "rev-parse", "HEAD")
	testutil.Unmount(t, mnt)
	if isMounted(t, mnt) {
		t.Fatalf("%s still mounted", mnt)
	}
	if got := h.agentGit(h.files(w), "rev-parse", "HEAD"); got != sha {
		t.Errorf("HEAD at the host path = %s, want %s", got, sha)
	}
	if got := h.agentGit(h.files(w), "status", "--porcelain"); got != "" {
		t.Errorf("git status at the host path = %q, want clean", got)
	}
}

// 4. The file API on a workspace.
func testFileAPI(t *testing.T, driver string) {
	h := newHarness(t, driver)
	w := h.create(CreateRequest{})
	files := h.files(w)
	ctx := t.Context()
	fs, release, err := h.m.Files(ctx, w.ID, true)
	if err != nil {
		t.Fatal(err)
	}
	defer release()

	info, err := fs.Write(ctx, "a/b/c.txt", strings.NewReader("nested\n"), 0, true)
	if err != nil {
		t.Fatal(err)
	}
	if info.Type != fileapi.TypeFile || info.Size != 7 || info.Path != "a/b/c.txt" {
		t.Errorf("Write = %+v", info)
	}
	var buf strings.Builder
	if _, err := fs.Read(ctx, "a/b/c.txt", &buf); err != nil || buf.String() != "nested\n" {
		t.Errorf("Read = %q, %v", buf.String(), err)
	}
	if st, err := fs.Stat(ctx, "a/b/c.txt"); err != nil || st.Type != fileapi.TypeFile || st.Size != 7 || st.Mode != "0644" {
		t.Errorf("Stat = %+v, %v", st, err)
	}
	list, err := fs.List(ctx, "a/b")
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"c.txt"}, names(list)); diff != "" {
		t.Errorf("List(a/b) (-want +got):\n%s", diff)
	}
	root, err := fs.List(ctx, ".")
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{".git", "README.md", "a", "docs", "keep", "second.txt", "src"}, names(root)); diff != "" {
		t.Errorf("List(.) (-want +got):\n%s", diff)
	}
	if d, err := fs.Mkdir(ctx, "d/e", true); err != nil || d.Type != fileapi.TypeDir {
		t.Errorf("Mkdir = %+v, %v", d, err)
	}
	if err := fs.Rename(ctx, "a/b/c.txt", "d/e/moved.txt"); err != nil {
		t.Fatal(err)
	}
	if _, err := fs.Stat(ctx, "a/b/c.txt"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("Stat of the rename source = %v, want ErrNotFound", err)
	}
	buf.Reset()
	if _, err := fs.Read(ctx, "d/e/moved.txt", &buf); err != nil || buf.String() != "nested\n" {
		t.Errorf("Read after rename = %q, %v", buf.String(), err)
	}
	if _, err := fs.Write(ctx, "owned.txt", strings.NewReader("x"), 0o600, false); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"a", "a/b", "d", "d/e", "d/e/moved.txt", "owned.txt"} {
		checkOwner(t, filepath.Join(files, p))
	}
	if err := fs.Remove(ctx, "d/e/moved.txt", false); err != nil {
		t.Fatal(err)
	}
	if _, err := fs.Stat(ctx, "d/e/moved.txt"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("Stat after remove = %v, want ErrNotFound", err)
	}
	if _, err := os.Lstat(filepath.Join(files, "d/e/moved.txt")); !os.IsNotExist(err) {
		t.Errorf("removed file still on disk: %v", err)
	}
	if err := fs.Remove(ctx, "a", true); err != nil {
		t.Fatal(err)
	}
	if _, err := fs.Write(ctx, "../escape.txt", strings.NewReader("x"), 0, false); !errors.Is(err, errdefs.ErrInvalid) {
		t.Errorf("Write(../escape.txt) = %v, want ErrInvalid", err)
	}
}

func names(list []fileapi.Info) []string {
	out := []string{}
	for _, i := range list {
		out = append(out, i.Name)
	}
	return out
}

func sortedChanges(cs []workspace.Change) []workspace.Change {
	cs = slices.Clone(cs)
	slices.SortFunc(cs, func(a, b workspace.Change) int { return strings.Compare(a.Path, b.Path) })
	return cs
}

// 5. Status and Diff after writes through the file API.
func testStatusDiff(t *testing.T, driver string) {
	h := newHarness(t, driver)
	w := h.create(CreateRequest{})
	clean := h.status(w.ID)
	want := Status{ID: w.ID, Branch: w.Branch, Head: w.BaseCommit, BaseCommit: w.BaseCommit, Dirty: false, Changes: []workspace.Change{}}
	if (clean.Disk != nil) != (suiteQuota > 0) || clean.Disk != nil && clean.Disk.Quota != suiteQuota {
		t.Errorf("Status.Disk = %+v with a quota of %d", clean.Disk, suiteQuota)
	}
	clean.Disk = nil
	if diff := cmp.Diff(want, clean); diff != "" {
		t.Errorf("Status of a new workspace (-want +got):\n%s", diff)
	}
	if d := h.diff(w.ID); d != "" {
		t.Errorf("Diff of a new workspace = %q, want empty", d)
	}

	h.writeFile(w.ID, "README.md", "hello\nthere\n")
	h.writeFile(w.ID, "src/new.go", "package newpkg\n")
	h.removeFile(w.ID, "docs/guide.txt")
	h.writeFile(w.ID, "assets/logo.bin", "\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\x00\x01\x02\x03")
	s := h.status(w.ID)
	wantChanges := []workspace.Change{
		{Status: "A", Path: "assets/logo.bin"},
		{Status: "M", Path: "README.md"},
		{Status: "D", Path: "docs/guide.txt"},
		{Status: "A", Path: "src/new.go"},
	}
	if diff := cmp.Diff(sortedChanges(wantChanges), sortedChanges(s.Changes)); diff != "" {
		t.Errorf("Status.Changes (-want +got):\n%s", diff)
	}
	if !s.Dirty {
		t.Error("Status.Dirty = false after changes")
	}
	if got, err := h.m.GetWorkspace(t.Context(), w.ID); err != nil || !got.Dirty {
		t.Errorf("stored Dirty = %v, %v; want true", got.Dirty, err)
	}
	d := h.diff(w.ID)
	for _, s := range []string{
		"diff --git a/README.md b/README.md", "-world", "+there",
		"new file mode 100644", "+package newpkg",
		"deleted file mode 100644", "-read me first",
		"GIT binary patch",
	} {
		if !strings.Contains(d, s) {
			t.Errorf("Diff does not contain %q:\n%s", s, d)
		}
	}
	tests := []struct {
		paths []string
		want  []string
	}{
		{paths: []string{"README.md"}, want: []string{"README.md"}},
		{paths: []string{"src"}, want: []string{"src/new.go"}},
		{paths: []string{"./docs/"}, want: []string{"docs/guide.txt"}},
		{paths: []string{"README.md", "assets/logo.bin"}, want: []string{"README.md", "assets/logo.bin"}},
		{paths: []string{"keep"}, want: nil},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.paths, ","), func(t *testing.T) {
			h := h.sub(t)
			d := h.diff(w.ID, tt.paths...)
			var got []string
			for _, line := range strings.Split(d, "\n") {
				if p, ok := strings.CutPrefix(line, "diff --git a/"); ok {
					got = append(got, strings.SplitN(p, " ", 2)[0])
				}
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("files in Diff(%q) (-want +got):\n%s", tt.paths, diff)
			}
		})
	}
	// A filtered diff says nothing about the whole workspace.
	if got, _ := h.m.GetWorkspace(t.Context(), w.ID); !got.Dirty {
		t.Error("a filtered empty diff cleared Dirty")
	}

	// Undo everything: the workspace is clean again.
	h.writeFile(w.ID, "README.md", v1Files["README.md"])
	h.writeFile(w.ID, "docs/guide.txt", v1Files["docs/guide.txt"])
	h.removeFile(w.ID, "src/new.go")
	h.removeFile(w.ID, "assets/logo.bin")
	undone := h.status(w.ID)
	undone.Disk = nil
	if diff := cmp.Diff(want, undone); diff != "" {
		t.Errorf("Status after undoing (-want +got):\n%s", diff)
	}
	if d := h.diff(w.ID); d != "" {
		t.Errorf("Diff after undoing = %q", d)
	}
	if got, _ := h.m.GetWorkspace(t.Context(), w.ID); got.Dirty {
		t.Error("stored Dirty = true after undoing")
	}
}

var shaRE = regexp.MustCompile(`^[0-9a-f]{40}$`)

// 6. Commits through the API.
func testCommit(t *testing.T, driver string) {
	h := newHarness(t, driver)
	ctx := t.Context()
	w := h.create(CreateRequest{})
	files := h.files(w)
	h.writeFile(w.ID, "README.md", "committed\n")
	h.writeFile(w.ID, "added/file.txt", "added\n")
	res, err := h.m.Commit(ctx, w.ID, "first change", nil)
	if err != nil {
		t.Fatal(err)
	}
	if !shaRE.MatchString(res.Commit) || res.ID != w.ID || res.Branch != w.Branch {
		t.Errorf("Commit = %+v", res)
	}
	// Before any plain git run (as root) rewrites the index.
	checkOwner(t, filepath.Join(files, ".git", "index"))
	checkOwner(t, filepath.Join(files, ".git", "refs", "heads", w.Branch))
	checkOwner(t, filepath.Join(files, ".git", "objects", res.Commit[:2], res.Commit[2:]))
	if got := h.agentGit(files, "log", "-1", "--format=%H %P %an <%ae> %s"); got != res.Commit+" "+w.BaseCommit+" agentbox <agentbox@localhost> first change" {
		t.Errorf("git log -1 = %q", got)
	}
	if got := h.agentGit(files, "rev-parse", "refs/heads/"+w.Branch); got != res.Commit {
		t.Errorf("branch %s = %s, want %s", w.Branch, got, res.Commit)
	}
	if got := h.agentGit(files, "status", "--porcelain"); got != "" {
		t.Errorf("git status after Commit = %q, want clean (index updated)", got)
	}
	if got := h.agentGit(files, "show", "--format=", "--name-status", "HEAD"); got != "M\tREADME.md\nA\tadded/file.txt" {
		t.Errorf("files in the commit = %q", got)
	}
	h.agentGit(files, "fsck", "--no-progress", "--no-dangling")
	checkNoHostPaths(t, h, files)
	d := h.diff(w.ID)
	if !strings.Contains(d, "+committed") || !strings.Contains(d, "added/file.txt") {
		t.Errorf("Diff after Commit (against the base) lacks the change:\n%s", d)
	}
	if s := h.status(w.ID); s.Head != res.Commit || s.Branch != w.Branch {
		t.Errorf("Status after Commit = %+v", s)
	}

	if _, err := h.m.Commit(ctx, w.ID, "again", nil); !errors.Is(err, errdefs.ErrConflict) {
		t.Errorf("Commit with nothing to commit = %v, want ErrConflict", err)
	}
	h.writeFile(w.ID, "more.txt", "more\n")
	for _, tt := range []struct {
		msg    string
		author *workspace.Author
	}{
		{msg: ""},
		{msg: " \n\t"},
		{msg: "ok", author: &workspace.Author{Name: "Evil <x@y>", Email: "e@x"}},
		{msg: "ok", author: &workspace.Author{Name: "No Mail"}},
	} {
		if _, err := h.m.Commit(ctx, w.ID, tt.msg, tt.author); !errors.Is(err, errdefs.ErrInvalid) {
			t.Errorf("Commit(%q, %+v) = %v, want ErrInvalid", tt.msg, tt.author, err)
		}
	}
	if got := h.agentGit(files, "rev-parse", "HEAD"); got != res.Commit {
		t.Errorf("a refused commit moved HEAD to %s", got)
	}
	res2, err := h.m.Commit(ctx, w.ID, "by ann", &workspace.Author{Name: "Ann", Email: "ann@example.invalid"})
	if err != nil {
		t.Fatal(err)
	}
	if got := h.agentGit(files, "log", "-1", "--format=%P %an <%ae>"); got != res.Commit+" Ann <ann@example.invalid>" {
		t.Errorf("git log -1 = %q", got)
	}

	// The agent commits with plain git; the next API commit goes on top.
	if err := os.WriteFile(filepath.Join(files, "agent.txt"), []byte("agent\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	h.agentGit(files, "add", "-A")
	h.agentGit(files, "commit", "-q", "-m", "by the agent")
	agentSHA := h.agentGit(files, "rev-parse", "HEAD")
	h.writeFile(w.ID, "api.txt", "api\n")
	res3, err := h.m.Commit(ctx, w.ID, "after the agent", nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := h.agentGit(files, "log", "--format=%H", "-4"); got != strings.Join([]string{res3.Commit, agentSHA, res2.Commit, res.Commit}, "\n") {
		t.Errorf("history = %q, want the API commit on the agent's", got)
	}
	if got := h.agentGit(files, "show", "--format=", "--name-only", "HEAD"); got != "api.txt" {
		t.Errorf("files in the API commit = %q, want api.txt", got)
	}
	if got := h.agentGit(files, "status", "--porcelain"); got != "" {
		t.Errorf("git status = %q, want clean", got)
	}
	h.agentGit(files, "fsck", "--no-progress", "--no-dangling")
	if n := len(h.events(w.ID, "workspace.committed")); n != 3 {
		t.Errorf("%d workspace.committed events, want 3", n)
	}
}

// 7. Forks are isolated copies.
func testFork(t *testing.T, driver string) {
	h := newHarness(t, driver)
	ctx := t.Context()
	parent := h.create(CreateRequest{Task: "solve"})
	h.writeFile(parent.ID, "committed.txt", "in a commit\n")
	pc, err := h.m.Commit(ctx, parent.ID, "parent work", nil)
	if err != nil {
		t.Fatal(err)
	}
	h.writeFile(parent.ID, "parent.txt", "uncommitted\n")

	child := h.fork(parent.ID, ForkRequest{})
	want := parent
	want.ID, want.ParentID, want.Branch, want.Dir, want.Dirty = child.ID, parent.ID, "agentbox/"+child.ID, filepath.Join(h.data, "workspaces", child.ID), child.Dirty
	if diff := cmp.Diff(want, child, ignoreTimes); diff != "" {
		t.Errorf("ForkWorkspace (-want +got):\n%s", diff)
	}
	cf, pf := h.files(child), h.files(parent)
	if cf == pf {
		t.Fatal("fork shares the parent's files")
	}
	for p, c := range map[string]string{"committed.txt": "in a commit\n", "parent.txt": "uncommitted\n"} {
		if got, ok := h.readFile(child.ID, p); !ok || got != c {
			t.Errorf("fork: %s = %q, %v; want %q", p, got, ok, c)
		}
	}
	if got := h.agentGit(cf, "rev-parse", "--abbrev-ref", "HEAD"); got != child.Branch {
		t.Errorf("fork branch = %q, want %s", got, child.Branch)
	}
	if got := h.agentGit(cf, "rev-parse", "HEAD"); got != pc.Commit {
		t.Errorf("fork HEAD = %q, want the parent's head %s", got, pc.Commit)
	}
	if got := h.agentGit(pf, "rev-parse", "--abbrev-ref", "HEAD"); got != parent.Branch {
		t.Errorf("parent HEAD = %q, want %s", got, parent.Branch)
	}
	if got := h.agentGit(cf, "status", "--porcelain"); got != "?? parent.txt" {
		t.Errorf("git status in the fork = %q", got)
	}

	h.writeFile(child.ID, "child.txt", "child\n")
	h.writeFile(parent.ID, "after.txt", "after the fork\n")
	if _, ok := h.readFile(parent.ID, "child.txt"); ok {
		t.Error("the fork's change is visible in the parent")
	}
	if _, ok := h.readFile(child.ID, "after.txt"); ok {
		t.Error("the parent's change after the fork is visible in the fork")
	}
	wantStatus := func(id string, paths ...string) {
		t.Helper()
		var want []workspace.Change
		for _, p := range paths {
			want = append(want, workspace.Change{Status: "A", Path: p})
		}
		if diff := cmp.Diff(want, sortedChanges(h.status(id).Changes)); diff != "" {
			t.Errorf("Status(%s) (-want +got):\n%s", id, diff)
		}
	}
	wantStatus(parent.ID, "after.txt", "committed.txt", "parent.txt")
	wantStatus(child.ID, "child.txt", "committed.txt", "parent.txt")

	// A fork of a fork, with its own branch and task.
	grand := h.fork(child.ID, ForkRequest{Branch: "attempt/2", Task: "retry"})
	if grand.ParentID != child.ID || grand.Branch != "attempt/2" || grand.Task != "retry" || grand.BaseCommit != parent.BaseCommit {
		t.Errorf("fork of a fork = %+v", grand)
	}
	if got := h.agentGit(h.files(grand), "rev-parse", "--abbrev-ref", "HEAD"); got != "attempt/2" {
		t.Errorf("grandchild branch = %q", got)
	}
	wantStatus(grand.ID, "child.txt", "committed.txt", "parent.txt")
	if n := len(h.events(grand.ID, "workspace.forked")); n != 1 {
		t.Errorf("%d workspace.forked events, want 1", n)
	}

	// The fork outlives its parent.
	if err := h.m.RemoveWorkspace(ctx, parent.ID); err != nil {
		t.Fatal(err)
	}
	if got, ok := h.readFile(child.ID, "parent.txt"); !ok || got != "uncommitted\n" {
		t.Errorf("fork after the parent's removal: parent.txt = %q, %v", got, ok)
	}
	if got := h.agentGit(cf, "log", "--format=%s"); got != "parent work\nsecond\ninitial" {
		t.Errorf("git log in the fork = %q", got)
	}
	if d := h.diff(child.ID); !strings.Contains(d, "+child") || !strings.Contains(d, "+uncommitted") || !strings.Contains(d, "+in a commit") {
		t.Errorf("Diff of the fork after the parent's removal:\n%s", d)
	}
	wantStatus(child.ID, "child.txt", "committed.txt", "parent.txt")
	if _, err := h.m.Commit(ctx, child.ID, "fork work", nil); err != nil {
		t.Errorf("Commit in the fork after the parent's removal: %v", err)
	}
	h.agentGit(cf, "fsck", "--no-progress", "--no-dangling")
}

// 8. Remove takes everything away.
func testRemove(t *testing.T, driver string) {
	h := newHarness(t, driver)
	ctx := t.Context()
	w := h.create(CreateRequest{})
	other := h.create(CreateRequest{})
	h.writeFile(w.ID, "x.txt", "x\n")
	refCount := func() int {
		t.Helper()
		p, err := h.st.GetPristine(ctx, other.PristineID)
		if err != nil {
			t.Fatal(err)
		}
		return p.RefCount
	}
	if driver == workspace.Overlay {
		if w.PristineID != other.PristineID {
			t.Fatalf("two workspaces of one commit use pristines %s and %s", w.PristineID, other.PristineID)
		}
		if n := refCount(); n != 2 {
			t.Errorf("RefCount = %d, want 2", n)
		}
	}
	files := h.files(w)
	if err := h.m.RemoveWorkspace(ctx, w.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(w.Dir); !os.IsNotExist(err) {
		t.Errorf("workspace dir after Remove: %v", err)
	}
	if isMounted(t, files) {
		t.Error("files still mounted after Remove")
	}
	if _, err := h.m.GetWorkspace(ctx, w.ID); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("GetWorkspace after Remove = %v, want ErrNotFound", err)
	}
	if n := len(h.events(w.ID, "workspace.removed")); n != 1 {
		t.Errorf("%d workspace.removed events, want 1", n)
	}
	if err := h.m.RemoveWorkspace(ctx, w.ID); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("second Remove = %v, want ErrNotFound", err)
	}
	if driver == workspace.Overlay {
		if n := refCount(); n != 1 {
			t.Errorf("RefCount after Remove = %d, want 1", n)
		}
	}
	// The other workspace is untouched.
	if got, ok := h.readFile(other.ID, "README.md"); !ok || got != v1Files["README.md"] {
		t.Errorf("other workspace: README.md = %q, %v", got, ok)
	}
	if diff := cmp.Diff([]string{other.ID}, dirNames(t, filepath.Join(h.data, "workspaces"))); diff != "" {
		t.Errorf("workspace dirs (-want +got):\n%s", diff)
	}
}

// 9. After a reboot (mounts gone, daemon restarted) every workspace is
// attached again with its changes.
func testRemountAfterRestart(t *testing.T, driver string) {
	h := newHarness(t, driver)
	a := h.create(CreateRequest{})
	h.writeFile(a.ID, "a.txt", "a\n")
	b := h.create(CreateRequest{Ref: "v1"})
	h.writeFile(b.ID, "b.txt", "b\n")
	h.removeFile(b.ID, "README.md")
	c := h.fork(a.ID, ForkRequest{})
	h.writeFile(c.ID, "c.txt", "c\n")
	wss := []store.Workspace{a, b, c}
	wantChanges := map[string][]workspace.Change{
		a.ID: {{Status: "A", Path: "a.txt"}},
		b.ID: {{Status: "D", Path: "README.md"}, {Status: "A", Path: "b.txt"}},
		c.ID: {{Status: "A", Path: "a.txt"}, {Status: "A", Path: "c.txt"}},
	}
	if driver == workspace.Overlay || suiteQuota > 0 {
		// A reboot: the overlay and then the quota volume go.
		for _, w := range wss {
			for _, mp := range mountsUnder(t, w.Dir) { // deepest first
				testutil.Unmount(t, mp)
			}
		}
		if left := mountsUnder(t, h.data); len(left) != 0 {
			t.Fatalf("mounts left after unmounting: %q", left)
		}
	}
	h.reopen()
	for _, w := range wss {
		if got := isMounted(t, h.files(w)); got != (driver == workspace.Overlay) {
			t.Errorf("%s mounted = %v after restart", w.ID, got)
		}
		s := h.status(w.ID)
		if diff := cmp.Diff(wantChanges[w.ID], sortedChanges(s.Changes)); diff != "" {
			t.Errorf("Status(%s) after restart (-want +got):\n%s", w.ID, diff)
		}
		if got := h.agentGit(h.files(w), "rev-parse", "--abbrev-ref", "HEAD"); got != w.Branch {
			t.Errorf("%s: branch after restart = %q", w.ID, got)
		}
		want := 0
		if driver == workspace.Overlay || suiteQuota > 0 {
			want = 1
		}
		if n := len(h.events(w.ID, "workspace.remounted")); n != want {
			t.Errorf("%s: %d workspace.remounted events, want %d", w.ID, n, want)
		}
	}
	if got, ok := h.readFile(c.ID, "c.txt"); !ok || got != "c\n" {
		t.Errorf("c.txt after restart = %q, %v", got, ok)
	}
	// A second restart with everything mounted repairs nothing.
	h.reopen()
	for _, w := range wss {
		if n := len(h.events(w.ID, "workspace.remounted")); n > 1 {
			t.Errorf("%s: %d workspace.remounted events after a clean restart", w.ID, n)
		}
	}
}

// An overlay unmounted behind the daemon's back (a manual umount) is
// mounted again by the next operation: otherwise reads would see an empty
// directory and writes would land under the mount point, to be hidden by
// the next mount.
func testReattachOnUse(t *testing.T, driver string) {
	h := newHarness(t, driver)
	w := h.create(CreateRequest{})
	h.writeFile(w.ID, "kept.txt", "kept\n")
	files := h.files(w)
	if driver == workspace.Overlay {
		testutil.Unmount(t, files)
	}
	// Many operations at once mount it once.
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for i := range 16 {
		wg.Go(func() {
			var err error
			if i%2 == 0 {
				_, err = h.m.Status(t.Context(), w.ID)
			} else {
				var release func()
				if _, release, err = h.m.Files(t.Context(), w.ID, false); err == nil {
					release()
				}
			}
			errs <- err
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Error(err)
		}
	}
	if n := len(mountsUnder(t, files)); driver == workspace.Overlay && n != 1 {
		t.Errorf("%d mounts at %s, want 1", n, files)
	}
	if got, ok := h.readFile(w.ID, "kept.txt"); !ok || got != "kept\n" {
		t.Errorf("kept.txt after a manual unmount = %q, %v", got, ok)
	}
	h.writeFile(w.ID, "later.txt", "later\n")
	if diff := cmp.Diff([]workspace.Change{{Status: "A", Path: "kept.txt"}, {Status: "A", Path: "later.txt"}}, h.status(w.ID).Changes); diff != "" {
		t.Errorf("Status (-want +got):\n%s", diff)
	}
	if driver == workspace.Overlay {
		if !isMounted(t, files) {
			t.Fatal("files not mounted again")
		}
		if n := len(h.events(w.ID, "workspace.remounted")); n != 1 {
			t.Errorf("%d workspace.remounted events, want 1", n)
		}
		// What was written after the unmount is in the upper layer.
		if _, err := os.Stat(filepath.Join(layoutDir(w), "upper", "later.txt")); err != nil {
			t.Errorf("later.txt is not in the upper layer: %v", err)
		}
	}
}

var errInjected = errors.New("injected failure")

// 10. A failure at any step of create or fork leaves nothing behind.
func testFailureInjection(t *testing.T, driver string) {
	h := newHarness(t, driver)
	parent := h.create(CreateRequest{})
	h.writeFile(parent.ID, "p.txt", "p\n")
	for _, tt := range injectedSteps {
		t.Run(tt.op+"/"+tt.step, func(t *testing.T) {
			h := h.sub(t)
			ctx := t.Context()
			before := h.snapshot()
			beforeDirs := dirNames(t, filepath.Join(h.data, "workspaces"))
			beforeMounts := mountsUnder(t, h.data)
			var seen []string
			h.m.failAt = func(step string) error {
				seen = append(seen, step)
				if step == tt.step {
					return errInjected
				}
				return nil
			}
			var err error
			var w store.Workspace
			switch tt.op {
			case "create":
				w, err = h.m.CreateWorkspace(ctx, CreateRequest{Repo: h.repo.ID})
			case "fork":
				w, err = h.m.ForkWorkspace(ctx, parent.ID, ForkRequest{})
			}
			h.m.failAt = nil
			if !errors.Is(err, errInjected) {
				t.Fatalf("%s with a failure at %q = %v, want the injected error (steps seen: %q)", tt.op, tt.step, err, seen)
			}
			if !slices.Contains(seen, tt.step) {
				t.Errorf("step %q never reached; steps seen: %q", tt.step, seen)
			}
			if diff := cmp.Diff(before, h.snapshot()); diff != "" {
				t.Errorf("state after the failure (-before +after):\n%s", diff)
			}
			if diff := cmp.Diff(beforeDirs, dirNames(t, filepath.Join(h.data, "workspaces"))); diff != "" {
				t.Errorf("workspace dirs (-before +after):\n%s", diff)
			}
			if diff := cmp.Diff(beforeMounts, mountsUnder(t, h.data)); diff != "" {
				t.Errorf("mounts (-before +after):\n%s", diff)
			}
			if w.ID != "" {
				if _, err := h.st.GetWorkspace(ctx, w.ID); !errors.Is(err, errdefs.ErrNotFound) {
					t.Errorf("row %s after the failure: %v", w.ID, err)
				}
				if n := len(h.events(w.ID, "")); n != 0 {
					t.Errorf("%d events for the failed workspace %s", n, w.ID)
				}
			}
			// The next normal call works.
			var next store.Workspace
			if tt.op == "create" {
				next = h.create(CreateRequest{})
			} else {
				next = h.fork(parent.ID, ForkRequest{})
				if got, ok := h.readFile(next.ID, "p.txt"); !ok || got != "p\n" {
					t.Errorf("fork after a failed fork: p.txt = %q, %v", got, ok)
				}
			}
			if s := h.status(next.ID); s.Branch != next.Branch {
				t.Errorf("Status after a failed %s = %+v", tt.op, s)
			}
			if err := h.m.RemoveWorkspace(ctx, next.ID); err != nil {
				t.Fatal(err)
			}
		})
	}
	if got, ok := h.readFile(parent.ID, "p.txt"); !ok || got != "p\n" {
		t.Errorf("parent after the failed forks: p.txt = %q, %v", got, ok)
	}
}

// 11. A restart finishes what a crash left: half-made creates are rolled
// back, half-done removals completed.
func testCrashLeftovers(t *testing.T, driver string) {
	h := newHarness(t, driver)
	ctx := t.Context()
	keep := h.create(CreateRequest{})
	h.writeFile(keep.ID, "keep.txt", "keep\n")
	drv, err := workspace.New(driver)
	if err != nil {
		t.Fatal(err)
	}
	lower := ""
	if keep.PristineID != "" {
		p, err := h.st.GetPristine(ctx, keep.PristineID)
		if err != nil {
			t.Fatal(err)
		}
		lower = p.Path
	}
	// leftover inserts a row in state and, with files, a real half-made
	// workspace directory (mounted, for overlay).
	leftover := func(id, state string, files bool) store.Workspace {
		t.Helper()
		now := keep.CreatedAt
		w := store.Workspace{ID: id, RepoID: h.repo.ID, PristineID: keep.PristineID, Ref: "main",
			BaseCommit: keep.BaseCommit, Branch: "agentbox/" + id, Driver: driver,
			Dir: filepath.Join(h.data, "workspaces", id), State: state, CreatedAt: now, UpdatedAt: now}
		if err := h.st.CreateWorkspace(ctx, w); err != nil {
			t.Fatal(err)
		}
		if !files {
			return w
		}
		if err := os.Mkdir(w.Dir, 0o711); err != nil {
			t.Fatal(err)
		}
		if err := drv.Create(ctx, w.Dir, workspace.Source{Repo: h.repo, Commit: keep.BaseCommit, Lower: lower, UID: testUID, GID: testGID}); err != nil {
			t.Fatal(err)
		}
		if driver == workspace.Overlay && !isMounted(t, drv.Files(w.Dir)) {
			t.Fatalf("leftover %s is not mounted", id)
		}
		return w
	}
	tests := []struct {
		w         store.Workspace
		wantEvent string
	}{
		{leftover("ws_crashcreate1", store.WorkspaceCreating, true), "workspace.rolled_back"},
		{leftover("ws_crashcreate2", store.WorkspaceCreating, false), "workspace.rolled_back"},
		{leftover("ws_crashremove1", store.WorkspaceRemoving, true), "workspace.removed"},
	}
	// A removal that got as far as unmounting.
	half := leftover("ws_crashremove2", store.WorkspaceRemoving, true)
	if err := drv.Detach(ctx, half.Dir); err != nil {
		t.Fatal(err)
	}
	tests = append(tests, struct {
		w         store.Workspace
		wantEvent string
	}{half, "workspace.removed"})

	h.reopen()
	for _, tt := range tests {
		if _, err := h.st.GetWorkspace(ctx, tt.w.ID); !errors.Is(err, errdefs.ErrNotFound) {
			t.Errorf("%s (%s) after restart: %v, want ErrNotFound", tt.w.ID, tt.w.State, err)
		}
		if _, err := os.Lstat(tt.w.Dir); !os.IsNotExist(err) {
			t.Errorf("%s: dir after restart: %v", tt.w.ID, err)
		}
		if n := len(h.events(tt.w.ID, tt.wantEvent)); n != 1 {
			t.Errorf("%s: %d %s events, want 1", tt.w.ID, n, tt.wantEvent)
		}
	}
	wantMounts := []string{} // deepest first
	if driver == workspace.Overlay {
		wantMounts = append(wantMounts, h.files(keep))
	}
	if suiteQuota > 0 {
		wantMounts = append(wantMounts, layoutDir(keep))
	}
	if left := mountsUnder(t, h.data); !slices.Equal(left, wantMounts) {
		t.Errorf("mounts after restart = %q, want %q", left, wantMounts)
	}
	if diff := cmp.Diff([]string{keep.ID}, dirNames(t, filepath.Join(h.data, "workspaces"))); diff != "" {
		t.Errorf("workspace dirs after restart (-want +got):\n%s", diff)
	}
	if got, ok := h.readFile(keep.ID, "keep.txt"); !ok || got != "keep\n" {
		t.Errorf("the ready workspace after restart: keep.txt = %q, %v", got, ok)
	}
}

// 12. Bad input is refused with the right class and changes nothing.
func testBadInput(t *testing.T, driver string) {
	h := newHarness(t, driver)
	ctx := t.Context()
	w := h.create(CreateRequest{})
	h.writeFile(w.ID, "x.txt", "x\n")
	const unknownWS = "ws_000000000000"
	creates := []struct {
		name    string
		req     CreateRequest
		want    error
		mention string
	}{
		{name: "unknown repo id", req: CreateRequest{Repo: "repo_000000000000"}, want: errdefs.ErrNotFound, mention: "repo_000000000000"},
		{name: "empty repo", req: CreateRequest{Repo: " "}, want: errdefs.ErrInvalid},
		{name: "remote helper url", req: CreateRequest{Repo: "ext::sh -c touch% /tmp/pwned"}, want: errdefs.ErrInvalid},
		{name: "dash url", req: CreateRequest{Repo: "-uupload-pack=touch /tmp/pwned"}, want: errdefs.ErrInvalid},
		{name: "missing path", req: CreateRequest{Repo: "/definitely/not/here"}, want: errdefs.ErrInvalid},
		{name: "unknown branch", req: CreateRequest{Ref: "no-such-branch"}, want: errdefs.ErrNotFound, mention: "no-such-branch"},
		{name: "unknown commit", req: CreateRequest{Ref: "0123456789abcdef0123456789abcdef01234567"}, want: errdefs.ErrNotFound, mention: "0123456789abcdef0123456789abcdef01234567"},
		{name: "ref with dots", req: CreateRequest{Ref: "a..b"}, want: errdefs.ErrInvalid},
		{name: "ref with dash", req: CreateRequest{Ref: "--upload-pack=x"}, want: errdefs.ErrInvalid},
		{name: "branch dash", req: CreateRequest{Branch: "-x"}, want: errdefs.ErrInvalid, mention: "-x"},
		{name: "branch dots", req: CreateRequest{Branch: "a..b"}, want: errdefs.ErrInvalid, mention: "a..b"},
		{name: "branch space", req: CreateRequest{Branch: "has space"}, want: errdefs.ErrInvalid, mention: "has space"},
		{name: "branch HEAD", req: CreateRequest{Branch: "HEAD"}, want: errdefs.ErrInvalid},
		{name: "branch lock", req: CreateRequest{Branch: "x.lock"}, want: errdefs.ErrInvalid},
		{name: "branch refs", req: CreateRequest{Branch: "refs/heads/x"}, want: errdefs.ErrInvalid},
		{name: "task control", req: CreateRequest{Task: "a\nb"}, want: errdefs.ErrInvalid},
		{name: "driver", req: CreateRequest{Driver: "zfs"}, want: errdefs.ErrInvalid, mention: "zfs"},
	}
	type call struct {
		name string
		f    func() error
	}
	var calls []call
	for _, tt := range creates {
		calls = append(calls, call{"CreateWorkspace/" + tt.name, func() error {
			req := tt.req
			if req.Repo == "" {
				req.Repo = h.repo.ID
			}
			_, err := h.m.CreateWorkspace(ctx, req)
			if err == nil || !errors.Is(err, tt.want) {
				return errors.Join(errors.New("wrong class, want "+tt.want.Error()), err)
			}
			if tt.mention != "" && !strings.Contains(err.Error(), tt.mention) {
				return errors.Join(errors.New("error does not name "+tt.mention), err)
			}
			return nil
		}})
	}
	expect := func(want error, f func() error) func() error {
		return func() error {
			if err := f(); !errors.Is(err, want) {
				return errors.Join(errors.New("wrong class, want "+want.Error()), err)
			}
			return nil
		}
	}
	for _, b := range []string{"-x", "a..b", "has space"} {
		calls = append(calls, call{"ForkWorkspace/branch " + b, expect(errdefs.ErrInvalid, func() error {
			_, err := h.m.ForkWorkspace(ctx, w.ID, ForkRequest{Branch: b})
			return err
		})})
	}
	calls = append(calls,
		call{"AddRepo/bad url", expect(errdefs.ErrInvalid, func() error { _, _, err := h.m.AddRepo(ctx, "fd::17", nil); return err })},
		call{"GetWorkspace/empty", expect(errdefs.ErrInvalid, func() error { _, err := h.m.GetWorkspace(ctx, ""); return err })},
		call{"GetWorkspace", expect(errdefs.ErrNotFound, func() error { _, err := h.m.GetWorkspace(ctx, unknownWS); return err })},
		call{"RemoveWorkspace", expect(errdefs.ErrNotFound, func() error { return h.m.RemoveWorkspace(ctx, unknownWS) })},
		call{"ForkWorkspace", expect(errdefs.ErrNotFound, func() error { _, err := h.m.ForkWorkspace(ctx, unknownWS, ForkRequest{}); return err })},
		call{"Status", expect(errdefs.ErrNotFound, func() error { _, err := h.m.Status(ctx, unknownWS); return err })},
		call{"Diff", expect(errdefs.ErrNotFound, func() error { _, err := h.m.Diff(ctx, unknownWS, nil); return err })},
		call{"Commit", expect(errdefs.ErrNotFound, func() error { _, err := h.m.Commit(ctx, unknownWS, "m", nil); return err })},
		call{"Files/read", expect(errdefs.ErrNotFound, func() error { _, _, err := h.m.Files(ctx, unknownWS, false); return err })},
		call{"Files/write", expect(errdefs.ErrNotFound, func() error { _, _, err := h.m.Files(ctx, unknownWS, true); return err })},
		call{"RemoveRepo", expect(errdefs.ErrNotFound, func() error { return h.m.RemoveRepo(ctx, "repo_000000000000", true) })},
		call{"ListWorkspaces/unknown repo", expect(errdefs.ErrNotFound, func() error { _, err := h.m.ListWorkspaces(ctx, ListFilter{Repo: "repo_000000000000"}); return err })},
	)
	for _, p := range []string{"../x", "/etc/passwd", "a/../../etc", "", "a\x00b", `..\x`} {
		calls = append(calls, call{"Diff/path " + p, expect(errdefs.ErrInvalid, func() error { _, err := h.m.Diff(ctx, w.ID, []string{"README.md", p}); return err })})
	}
	for _, c := range calls {
		t.Run(c.name, func(t *testing.T) {
			h := h.sub(t)
			before := h.snapshot()
			if err := c.f(); err != nil {
				t.Error(err)
			}
			if diff := cmp.Diff(before, h.snapshot()); diff != "" {
				t.Errorf("state changed (-before +after):\n%s", diff)
			}
		})
	}
	// The workspace used above is intact.
	if diff := cmp.Diff([]workspace.Change{{Status: "A", Path: "x.txt"}}, h.status(w.ID).Changes); diff != "" {
		t.Errorf("Status (-want +got):\n%s", diff)
	}
}

// 13. A repo in use is not removed unless forced; forced, it takes its
// workspaces along.
func testRemoveRepo(t *testing.T, driver string) {
	h := newHarness(t, driver)
	ctx := t.Context()
	a := h.create(CreateRequest{})
	b := h.fork(a.ID, ForkRequest{})
	h.writeFile(b.ID, "b.txt", "b\n")
	before := h.snapshot()
	err := h.m.RemoveRepo(ctx, h.repo.ID, false)
	if !errors.Is(err, errdefs.ErrConflict) {
		t.Fatalf("RemoveRepo while in use = %v, want ErrConflict", err)
	}
	for _, id := range []string{h.repo.ID, a.ID, b.ID} {
		if !strings.Contains(err.Error(), id) {
			t.Errorf("error %q does not name %s", err, id)
		}
	}
	if diff := cmp.Diff(before, h.snapshot()); diff != "" {
		t.Errorf("refused RemoveRepo changed state (-before +after):\n%s", diff)
	}
	if got, ok := h.readFile(b.ID, "b.txt"); !ok || got != "b\n" {
		t.Errorf("workspace after a refused RemoveRepo: b.txt = %q, %v", got, ok)
	}
	pristines, err := h.st.ListPristines(ctx, h.repo.ID)
	if err != nil {
		t.Fatal(err)
	}
	if err := h.m.RemoveRepo(ctx, h.src.Dir, true); err != nil { // by URL
		t.Fatal(err)
	}
	for _, w := range []store.Workspace{a, b} {
		if _, err := h.m.GetWorkspace(ctx, w.ID); !errors.Is(err, errdefs.ErrNotFound) {
			t.Errorf("%s after a forced RemoveRepo: %v", w.ID, err)
		}
		if _, err := os.Lstat(w.Dir); !os.IsNotExist(err) {
			t.Errorf("%s dir after a forced RemoveRepo: %v", w.ID, err)
		}
	}
	if _, err := h.m.GetRepo(ctx, h.repo.ID); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("GetRepo after RemoveRepo = %v", err)
	}
	if _, err := os.Lstat(h.repo.Path); !os.IsNotExist(err) {
		t.Errorf("mirror after RemoveRepo: %v", err)
	}
	for _, p := range pristines {
		if _, err := os.Lstat(p.Path); !os.IsNotExist(err) {
			t.Errorf("pristine %s after RemoveRepo: %v", p.ID, err)
		}
	}
	if got := h.snapshot(); got != (snapshot{}) {
		t.Errorf("after a forced RemoveRepo = %+v, want nothing left", got)
	}
	if n := len(h.events(a.ID, "workspace.removed")); n != 1 {
		t.Errorf("%d workspace.removed events for %s", n, a.ID)
	}
}

// 14a. Configuration planted in the workspace's .git makes host-side git
// run nothing and read nothing outside the workspace.
func testHostileConfig(t *testing.T, driver string) {
	h := newHarness(t, driver)
	ctx := t.Context()
	w := h.create(CreateRequest{})
	files := h.files(w)
	gitDir := filepath.Join(files, ".git")
	canaries := t.TempDir()
	// The payload lives in the workspace, where a sandbox would put it.
	payload := filepath.Join(gitDir, "payload.sh")
	mustWrite(t, payload, "#!/bin/sh\ntouch '"+canaries+"'/\"$1\"\ncat\n", 0o755)
	hooks := filepath.Join(gitDir, "evil-hooks")
	for _, hook := range []string{"pre-commit", "commit-msg", "post-commit", "post-index-change", "reference-transaction", "post-checkout"} {
		mustWrite(t, filepath.Join(hooks, hook), "#!/bin/sh\ntouch '"+canaries+"'/"+hook+"\n", 0o755)
	}
	cfg := "[core]\n" +
		"\tfsmonitor = " + payload + " fsmonitor\n" +
		"\thooksPath = " + hooks + "\n" +
		"\tpager = " + payload + " pager\n" +
		"\teditor = " + payload + " editor\n" +
		"[diff]\n\texternal = " + payload + " diff-external\n" +
		"[diff \"y\"]\n\ttextconv = " + payload + " textconv\n\tcommand = " + payload + " diff-command\n" +
		"[filter \"x\"]\n\tclean = " + payload + " filter-clean\n\tsmudge = " + payload + " filter-smudge\n\trequired = true\n" +
		"[gpg]\n\tprogram = " + payload + " gpg\n[commit]\n\tgpgSign = true\n"
	appendFile(t, filepath.Join(gitDir, "config"), cfg)
	mustWrite(t, filepath.Join(files, ".gitattributes"), "* filter=x diff=y\n", 0o644)
	mustWrite(t, filepath.Join(files, "README.md"), "changed by the agent\n", 0o644)

	// The payloads are live: plain git in (a copy of) the workspace runs them.
	scratch := t.TempDir()
	cp := filepath.Join(scratch, "copy")
	if out, err := execCombined("cp", "-a", files, cp); err != nil {
		t.Fatalf("cp: %v\n%s", err, out)
	}
	h.agentGitErr(cp, "status")
	h.agentGitErr(cp, "diff")
	h.agentGitErr(cp, "commit", "-q", "-a", "-m", "x")
	for _, c := range []string{"fsmonitor", "filter-clean", "pre-commit"} {
		if _, err := os.Stat(filepath.Join(canaries, c)); err != nil {
			t.Errorf("the %s payload did not run under plain git, so this test proves nothing: %v", c, err)
		}
	}
	os.RemoveAll(cp)
	clearDir(t, canaries)

	h.writeFile(w.ID, "new.txt", "new\n")
	s := h.status(w.ID)
	wantChanges := []workspace.Change{{Status: "A", Path: ".gitattributes"}, {Status: "M", Path: "README.md"}, {Status: "A", Path: "new.txt"}}
	if diff := cmp.Diff(wantChanges, sortedChanges(s.Changes)); diff != "" {
		t.Errorf("Status (-want +got):\n%s", diff)
	}
	d := h.diff(w.ID)
	if !strings.Contains(d, "+changed by the agent") || !strings.Contains(d, "+new") {
		t.Errorf("Diff lacks the changes (a filter or external diff ran?):\n%s", d)
	}
	res, err := h.m.Commit(ctx, w.ID, "hostile", nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := dirNames(t, canaries); len(got) != 0 {
		t.Errorf("host-side git ran workspace payloads: %q", got)
	}

	// core.worktree pointing at the host.
	appendFile(t, filepath.Join(gitDir, "config"), "[core]\n\tworktree = /etc\n\tbare = false\n")
	h.writeFile(w.ID, "after.txt", "after\n")
	wantChanges = append(wantChanges, workspace.Change{Status: "A", Path: "after.txt"})
	if diff := cmp.Diff(sortedChanges(wantChanges), sortedChanges(h.status(w.ID).Changes)); diff != "" {
		t.Errorf("Status with core.worktree=/etc planted (-want +got):\n%s", diff)
	}
	d = h.diff(w.ID)
	for _, leak := range []string{"root:x:0:0", "passwd", "hostname", "a/etc/", "os-release"} {
		if strings.Contains(d, leak) {
			t.Errorf("Diff contains %q with core.worktree=/etc planted", leak)
		}
	}
	res2, err := h.m.Commit(ctx, w.ID, "after", nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := dirNames(t, canaries); len(got) != 0 {
		t.Errorf("host-side git ran workspace payloads: %q", got)
	}
	// Inspect the commits with git's plain object reader, without the
	// workspace's config.
	tree := testGitDir(t, gitDir, "ls-tree", "-r", "--name-only", res2.Commit)
	if tree != strings.Join([]string{".gitattributes", "README.md", "after.txt", "docs/guide.txt", "keep/old.txt", "new.txt", "second.txt", "src/main.go"}, "\n") {
		t.Errorf("files in the commit = %q", tree)
	}
	if got := testGitDir(t, gitDir, "rev-parse", res2.Commit+"^"); got != res.Commit {
		t.Errorf("parent = %s, want %s", got, res.Commit)
	}
	if got := testGitDir(t, gitDir, "cat-file", "blob", res.Commit+":README.md"); got != "changed by the agent" {
		t.Errorf("README.md in the commit = %q (a clean filter ran?)", got)
	}
}

// 14b. Symlinks out of the workspace and FIFOs in it.
func testHostileLinksAndFIFOs(t *testing.T, driver string) {
	h := newHarness(t, driver)
	ctx := t.Context()
	w := h.create(CreateRequest{})
	files := h.files(w)
	for name, target := range map[string]string{
		"passwd-link": "/etc/passwd",
		"etc-link":    "/etc",
		"up-link":     "../../../../../../../etc/shadow",
		"proc-link":   "/proc/self/root/etc/passwd",
		"docs/guide2": "guide.txt",
		"dangling":    "/nonexistent/x",
		"self-loop":   "self-loop",
	} {
		if err := os.Symlink(target, filepath.Join(files, name)); err != nil {
			t.Fatal(err)
		}
	}
	s := h.status(w.ID)
	var got []string
	for _, c := range s.Changes {
		got = append(got, c.Status+" "+c.Path)
	}
	slices.Sort(got)
	if diff := cmp.Diff([]string{"A dangling", "A docs/guide2", "A etc-link", "A passwd-link", "A proc-link", "A self-loop", "A up-link"}, got); diff != "" {
		t.Errorf("Status with symlinks (-want +got):\n%s", diff)
	}
	d := h.diff(w.ID)
	if !strings.Contains(d, "new file mode 120000") || !strings.Contains(d, "+/etc/passwd\n\\ No newline at end of file") {
		t.Errorf("Diff does not show passwd-link as a symlink:\n%s", d)
	}
	passwd, err := os.ReadFile("/etc/passwd")
	if err != nil {
		t.Fatal(err)
	}
	firstLine := strings.SplitN(string(passwd), "\n", 2)[0]
	if strings.Contains(d, firstLine) || strings.Contains(d, "root:") {
		t.Errorf("Diff contains /etc/passwd's content:\n%s", d)
	}
	if _, err := h.m.Commit(ctx, w.ID, "links", nil); err != nil {
		t.Fatal(err)
	}
	if got := h.agentGit(files, "cat-file", "-p", "HEAD:passwd-link"); got != "/etc/passwd" {
		t.Errorf("passwd-link in the commit = %q", got)
	}

	// FIFOs: git must never block opening one.
	const (
		ignored = iota // git skips it: everything works
		refused        // git would block opening it: refused up front
		failed         // git fails on it by itself, promptly
	)
	fifos := []struct {
		name string
		path string
		want int
	}{
		{name: "untracked", path: "pipe", want: ignored},
		{name: "nested untracked", path: "deep/er/pipe", want: ignored},
		{name: "in the top .git", path: ".git/pipe", want: ignored},
		{name: "gitignore", path: ".gitignore", want: refused},
		{name: "nested gitattributes", path: "src/.gitattributes", want: refused},
		{name: "gitmodules", path: ".gitmodules", want: refused},
		{name: "nested repo HEAD", path: "vendor/lib/.git/HEAD", want: refused},
		{name: "nested repo packed-refs", path: "vendor/lib2/.git/packed-refs", want: refused},
		{name: "submodule git dir", path: ".git/modules/lib/HEAD", want: refused},
		{name: "tracked file", path: "keep/old.txt", want: failed},
	}
	for _, tt := range fifos {
		t.Run("FIFO/"+tt.name, func(t *testing.T) {
			h := h.sub(t)
			p := filepath.Join(files, tt.path)
			if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
				t.Fatal(err)
			}
			if strings.Contains(tt.path, "/.git/") {
				// Enough of a repository for git to look inside.
				repo := filepath.Dir(p)
				for _, d := range []string{"objects", "refs/heads"} {
					os.MkdirAll(filepath.Join(repo, d), 0o755)
				}
				if filepath.Base(p) != "HEAD" {
					mustWrite(t, filepath.Join(repo, "HEAD"), "ref: refs/heads/main\n", 0o644)
				}
			}
			os.Remove(p)
			if err := unix.Mkfifo(p, 0o644); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() {
				os.Remove(p)
				os.RemoveAll(filepath.Join(files, "vendor"))
				os.RemoveAll(filepath.Join(files, "deep"))
				os.RemoveAll(filepath.Join(files, ".git", "modules"))
				if tt.path == "keep/old.txt" {
					mustWrite(t, p, v1Files["keep/old.txt"], 0o644)
				}
			})
			check := func(op string, err error) {
				t.Helper()
				switch {
				case tt.want == ignored && err != nil:
					t.Errorf("%s: %v", op, err)
				case tt.want == refused && (!errors.Is(err, errdefs.ErrConflict) || !strings.Contains(err.Error(), tt.path)):
					t.Errorf("%s = %v, want ErrConflict naming %s", op, err, tt.path)
				case tt.want == failed && err == nil:
					t.Errorf("%s succeeded with a FIFO in place of a tracked file", op)
				}
				if err != nil && !strings.Contains(err.Error(), w.ID) {
					t.Errorf("%s error %q does not name the workspace", op, err)
				}
			}
			st, err := within(t, 20*time.Second, "Status with a FIFO at "+tt.path, func() (Status, error) { return h.m.Status(ctx, w.ID) })
			check("Status", err)
			for _, c := range st.Changes {
				if c.Path == tt.path {
					t.Errorf("Status lists the FIFO: %+v", c)
				}
			}
			_, err = within(t, 20*time.Second, "Diff with a FIFO at "+tt.path, func() ([]byte, error) { return h.m.Diff(ctx, w.ID, nil) })
			check("Diff", err)
			h.writeFile(w.ID, "fifo-"+strings.ReplaceAll(tt.name, " ", "-")+".txt", "x\n")
			_, err = within(t, 20*time.Second, "Commit with a FIFO at "+tt.path, func() (CommitResult, error) { return h.m.Commit(ctx, w.ID, "with a fifo", nil) })
			check("Commit", err)
		})
	}
	// With the FIFOs gone, everything works again.
	if _, err := h.m.Status(ctx, w.ID); err != nil {
		t.Errorf("Status after removing the FIFOs: %v", err)
	}
}

func mustWrite(t *testing.T, p, content string, mode os.FileMode) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), mode); err != nil {
		t.Fatal(err)
	}
}

func appendFile(t *testing.T, p, content string) {
	t.Helper()
	f, err := os.OpenFile(p, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteString(content); err != nil {
		t.Fatal(err)
	}
}

func clearDir(t *testing.T, dir string) {
	t.Helper()
	for _, n := range dirNames(t, dir) {
		if err := os.RemoveAll(filepath.Join(dir, n)); err != nil {
			t.Fatal(err)
		}
	}
}

func execCombined(name string, args ...string) (string, error) {
	out, err := exec.CommandContext(context.Background(), name, args...).CombinedOutput()
	return string(out), err
}

// testGitDir reads objects from a git directory whose config is hostile:
// only object-reading commands are used, which run no hook, filter or
// monitor, and those are switched off on the command line as well.
func testGitDir(t *testing.T, gitDir string, args ...string) string {
	t.Helper()
	cmd := exec.CommandContext(t.Context(), "git", append([]string{"--git-dir=" + gitDir, "-c", "safe.directory=*", "-c", "core.fsmonitor=false", "-c", "core.hooksPath=/dev/null"}, args...)...)
	cmd.Dir = t.TempDir()
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=/nonexistent", "GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL=/dev/null"}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("git %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return strings.TrimSpace(string(out))
}
