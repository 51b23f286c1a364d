package manager

import (
	"archive/tar"
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/agentbox/agentbox/internal/archive"
	"github.com/agentbox/agentbox/internal/errdefs"
	"github.com/agentbox/agentbox/internal/repocache"
)

// Scratch workspaces (empty, or from an uploaded directory) are ordinary
// workspaces of a repo agentbox made itself; these run in the driver suite.

// tarEntry is one entry of an uploaded directory.
type tarEntry struct {
	name, body, link string
	typ              byte
	mode             int64
}

func tarball(t *testing.T, entries ...tarEntry) *bytes.Buffer {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range entries {
		hdr := &tar.Header{Name: e.name, Typeflag: e.typ, Mode: e.mode, Linkname: e.link}
		if hdr.Typeflag == 0 {
			hdr.Typeflag = tar.TypeReg
		}
		if hdr.Mode == 0 {
			hdr.Mode = 0o644
		}
		if hdr.Typeflag == tar.TypeReg {
			hdr.Size = int64(len(e.body))
		}
		if err := tw.WriteHeader(hdr); err != nil {
			t.Fatal(err)
		}
		tw.Write([]byte(e.body))
	}
	tw.Close()
	return &buf
}

// testEmpty: an empty workspace is a repository with one empty commit in
// which status, diff, commit and fork work from the first file on.
func testEmpty(t *testing.T, driver string) {
	h := newHarness(t, driver)
	ctx := t.Context()
	w, err := h.m.CreateWorkspace(ctx, CreateRequest{Empty: true, Task: "scratch"})
	if err != nil {
		t.Fatal(err)
	}
	files := h.files(w)
	if names := dirNames(t, files); !cmp.Equal(names, []string{".git"}) {
		t.Errorf("an empty workspace holds %q, want only .git", names)
	}
	checkNoHostPaths(t, h, files)
	repo, err := h.st.GetRepo(ctx, w.RepoID)
	if err != nil || repo.URL != repocache.EmptyURL || w.Ref != "main" {
		t.Fatalf("repo of an empty workspace = %+v, %v (ref %q)", repo, err, w.Ref)
	}
	if log := h.agentGit(files, "log", "--format=%s"); log != "agentbox: an empty workspace" {
		t.Errorf("git log in the workspace = %q", log)
	}
	if out := h.agentGit(files, "remote"); out != "" {
		t.Errorf("an empty workspace has remotes %q, want none", out)
	}
	if st := h.status(w.ID); st.Dirty || len(st.Changes) != 0 || st.Head != w.BaseCommit {
		t.Errorf("fresh status = %+v", st)
	}
	h.writeFile(w.ID, "hello.py", "print('hi')\n")
	if d := h.diff(w.ID); !strings.Contains(d, "+print('hi')") || !strings.Contains(d, "new file mode") {
		t.Errorf("diff = %q", d)
	}
	res, err := h.m.Commit(ctx, w.ID, "first file", nil)
	if err != nil {
		t.Fatal(err)
	}
	if log := h.agentGit(files, "log", "--format=%s"); log != "first file\nagentbox: an empty workspace" {
		t.Errorf("git log after commit = %q", log)
	}
	fork := h.fork(w.ID, ForkRequest{})
	if got, ok := h.readFile(fork.ID, "hello.py"); !ok || got != "print('hi')\n" {
		t.Errorf("the fork has hello.py = %q, %v", got, ok)
	}
	if st := h.status(fork.ID); st.Head != res.Commit {
		t.Errorf("the fork's head = %s, want %s", st.Head, res.Commit)
	}
	// Every empty workspace shares the one repo and its base commit.
	w2, err := h.m.CreateWorkspace(ctx, CreateRequest{Empty: true})
	if err != nil || w2.RepoID != w.RepoID || w2.BaseCommit != w.BaseCommit {
		t.Errorf("second empty workspace = %+v, %v", w2, err)
	}
	// A restart finds them all, mounted again.
	h.reopen()
	if got, ok := h.readFile(w.ID, "hello.py"); !ok || got != "print('hi')\n" {
		t.Errorf("after a restart hello.py = %q, %v", got, ok)
	}
	for _, id := range []string{w.ID, fork.ID, w2.ID} {
		if err := h.m.RemoveWorkspace(ctx, id); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := h.st.GetRepo(ctx, w.RepoID); err != nil {
		t.Errorf("the empty repo went with its workspaces: %v (it stays for the collector)", err)
	}
	// The collector takes it once unused, and the next empty workspace
	// makes it again.
	if _, err := h.m.GC(ctx, GCRequest{Budget: 1}, time.Now()); err != nil {
		t.Fatal(err)
	}
	if _, err := h.st.GetRepo(ctx, w.RepoID); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("the unused empty repo after a collection = %v, want gone", err)
	}
	w3, err := h.m.CreateWorkspace(ctx, CreateRequest{Empty: true})
	if err != nil || w3.RepoID == w.RepoID {
		t.Fatalf("empty workspace after the collection = %+v, %v", w3, err)
	}
	if err := h.m.RemoveWorkspace(ctx, w3.ID); err != nil {
		t.Fatal(err)
	}
	// The reconciler leaves the made repos alone.
	if reps, err := h.m.Reconcile(ctx); err != nil || len(reps) != 0 {
		t.Errorf("reconcile = %+v, %v; want no repair", reps, err)
	}
	// Bad requests change nothing.
	before := h.snapshot()
	for _, req := range []CreateRequest{{Empty: true, Repo: h.repo.ID}, {Empty: true, Ref: "main"}, {Empty: true, Branch: "a..b"}, {}} {
		if _, err := h.m.CreateWorkspace(ctx, req); !errors.Is(err, errdefs.ErrInvalid) {
			t.Errorf("CreateWorkspace(%+v) = %v, want ErrInvalid", req, err)
		}
	}
	if after := h.snapshot(); after != before {
		t.Errorf("bad requests changed %+v into %+v", before, after)
	}
}

// testUpload: a workspace from an uploaded directory has it as its base
// commit; its repo goes with the last workspace that uses it.
func testUpload(t *testing.T, driver string) {
	h := newHarness(t, driver)
	ctx := t.Context()
	w, err := h.m.UploadWorkspace(ctx, CreateRequest{Task: "upload"}, tarball(t,
		tarEntry{name: "./", typ: tar.TypeDir, mode: 0o755},
		tarEntry{name: "main.py", body: "print('up')\n"},
		tarEntry{name: "bin/run.sh", body: "#!/bin/sh\necho run\n", mode: 0o4755},
		tarEntry{name: "link", typ: tar.TypeSymlink, link: "main.py"},
		tarEntry{name: ".gitignore", body: "*.log\n"},
		tarEntry{name: "kept.log", body: "ignored files are uploaded too\n"},
	))
	if err != nil {
		t.Fatal(err)
	}
	files := h.files(w)
	checkTree(t, files, map[string]string{"main.py": "print('up')\n", "bin/run.sh": "#!/bin/sh\necho run\n", "kept.log": "ignored files are uploaded too\n"})
	if fi, err := os.Stat(filepath.Join(files, "bin/run.sh")); err != nil || fi.Mode().Perm() != 0o755 || fi.Mode()&os.ModeSetuid != 0 {
		t.Errorf("bin/run.sh: %v, %v; want 0755 without setuid", fi.Mode(), err)
	}
	if target, err := os.Readlink(filepath.Join(files, "link")); err != nil || target != "main.py" {
		t.Errorf("link -> %q, %v", target, err)
	}
	checkOwner(t, filepath.Join(files, "main.py"))
	checkNoHostPaths(t, h, files)
	repo, err := h.st.GetRepo(ctx, w.RepoID)
	if err != nil || !repocache.IsUpload(repo.URL) || repo.URL != repocache.UploadURLPrefix+repo.ID {
		t.Fatalf("repo of an upload = %+v, %v", repo, err)
	}
	if st := h.status(w.ID); st.Dirty || st.Head != w.BaseCommit {
		t.Errorf("fresh status = %+v", st)
	}
	if tracked := h.agentGit(files, "ls-files"); tracked != ".gitignore\nbin/run.sh\nkept.log\nlink\nmain.py" {
		t.Errorf("base commit holds %q", tracked)
	}
	h.writeFile(w.ID, "main.py", "print('changed')\n")
	if d := h.diff(w.ID); !strings.Contains(d, "-print('up')") || !strings.Contains(d, "+print('changed')") {
		t.Errorf("diff = %q", d)
	}
	if _, err := h.m.Commit(ctx, w.ID, "change", nil); err != nil {
		t.Fatal(err)
	}
	fork := h.fork(w.ID, ForkRequest{})
	if got, _ := h.readFile(fork.ID, "main.py"); got != "print('changed')\n" {
		t.Errorf("fork main.py = %q", got)
	}
	if _, err := h.m.FetchRepo(ctx, repo.ID, "", nil); !errors.Is(err, errdefs.ErrInvalid) {
		t.Errorf("fetching an upload's repo = %v, want ErrInvalid", err)
	}
	h.reopen()
	if got, _ := h.readFile(fork.ID, "main.py"); got != "print('changed')\n" {
		t.Errorf("after a restart fork main.py = %q", got)
	}
	// The repo stays while a workspace uses it, and goes with the last.
	if err := h.m.RemoveWorkspace(ctx, w.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := h.st.GetRepo(ctx, repo.ID); err != nil {
		t.Errorf("the upload's repo went while its fork uses it: %v", err)
	}
	if err := h.m.RemoveWorkspace(ctx, fork.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := h.st.GetRepo(ctx, repo.ID); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("the upload's repo after its last workspace = %v, want gone", err)
	}
	if _, err := os.Stat(repo.Path); !os.IsNotExist(err) {
		t.Errorf("the upload's mirror is still there: %v", err)
	}

	// Hostile uploads are refused and leave nothing: no row, no repo, no
	// staging directory.
	before := h.snapshot()
	for name, archive := range map[string]*bytes.Buffer{
		"traversal":    tarball(t, tarEntry{name: "../../etc/cron.d/x", body: "x"}),
		"through link": tarball(t, tarEntry{name: "l", typ: tar.TypeSymlink, link: "/etc"}, tarEntry{name: "l/passwd", body: "x"}),
		"device":       tarball(t, tarEntry{name: "null", typ: tar.TypeChar}),
		"git dir":      tarball(t, tarEntry{name: ".git/config", body: "[core]\n\tfsmonitor = touch /tmp/pwned\n"}),
		"not a tar":    bytes.NewBufferString(strings.Repeat("nope", 300)),
	} {
		if _, err := h.m.UploadWorkspace(ctx, CreateRequest{}, archive); !errors.Is(err, errdefs.ErrInvalid) {
			t.Errorf("upload %s = %v, want ErrInvalid", name, err)
		}
	}
	if _, err := h.m.UploadWorkspace(ctx, CreateRequest{Repo: h.repo.ID}, tarball(t, tarEntry{name: "a", body: "a"})); !errors.Is(err, errdefs.ErrInvalid) {
		t.Errorf("upload with a repo = %v, want ErrInvalid", err)
	}
	// A failure after the repo was made rolls it back too.
	h.m.failAt = func(step string) error {
		if step == "files" {
			return errors.New("injected")
		}
		return nil
	}
	if _, err := h.m.UploadWorkspace(ctx, CreateRequest{}, tarball(t, tarEntry{name: "a", body: "a"})); err == nil {
		t.Error("an upload with an injected failure succeeded")
	}
	h.m.failAt = nil
	if after := h.snapshot(); after != before {
		t.Errorf("refused uploads changed %+v into %+v", before, after)
	}
	for _, name := range dirNames(t, filepath.Join(h.data, "repos")) {
		if strings.HasPrefix(name, ".tmp-") {
			t.Errorf("staging left in repos/: %s", name)
		}
	}
	if repos, _ := h.st.ListRepos(ctx); len(repos) != 1 {
		t.Errorf("repos after refused uploads: %+v", repos)
	}
	// A crash between an upload's repo and its workspace leaves a repo
	// no workspace uses: the next start removes it.
	orphan, _, err := h.m.cache.Import(ctx, tarball(t, tarEntry{name: "a", body: "a"}), archive.Limits{}, repocache.Identity{Name: "t", Email: "t@t"})
	if err != nil {
		t.Fatal(err)
	}
	h.reopen()
	if _, err := h.st.GetRepo(ctx, orphan.ID); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("an orphaned upload repo after a restart = %v, want gone", err)
	}
	if _, err := os.Stat(orphan.Path); !os.IsNotExist(err) {
		t.Errorf("its mirror after a restart: %v", err)
	}
}
