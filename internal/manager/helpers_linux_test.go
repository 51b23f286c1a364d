package manager

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentbox/agentbox/internal/mountinfo"
	"github.com/agentbox/agentbox/internal/testutil/skip"

	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/internal/errdefs"
	"github.com/agentbox/agentbox/internal/store"
	"github.com/agentbox/agentbox/internal/store/sqlstore"
	"github.com/agentbox/agentbox/internal/testutil"
	"github.com/agentbox/agentbox/internal/workspace"
)

const (
	testUID = 1000
	testGID = 1000
)

// requireDriver skips (or, under AGENTBOX_REQUIRE_SETUP=1, fails) when this
// host cannot run workspaces of the driver as the tests need: chown to the
// sandbox user needs root, the overlay driver needs overlay mounts.
func requireDriver(t *testing.T, driver string) {
	t.Helper()
	if _, err := exec.LookPath("git"); err != nil {
		skip.OrFail(t, "git is not installed")
	}
	if os.Geteuid() != 0 {
		skip.OrFail(t, "workspace tests chown files to the sandbox user and mount overlays: run as root")
	}
	if driver == workspace.Overlay {
		if err := workspace.ProbeOverlay(t.TempDir()); err != nil {
			skip.OrFail(t, "overlay mounts do not work here: "+err.Error())
		}
	}
}

// Files of the source repository. The first commit is tagged v1; the
// default branch main has one more commit on top.
var (
	v1Files = map[string]string{
		"README.md":      "hello\nworld\n",
		"src/main.go":    "package main\n\nfunc main() {}\n",
		"docs/guide.txt": "read me first\n",
		"keep/old.txt":   "old\n",
	}
	mainFiles = map[string]string{
		"src/main.go": "package main\n\nfunc main() { println(\"hi\") }\n",
		"second.txt":  "only on main\n",
	}
)

// harness is one data dir, one database and one manager, with a source
// repository already cached.
type harness struct {
	t      *testing.T
	driver string
	// data is the manager's DataDir.
	data string
	// home is the agent's $HOME for plain git runs.
	home string
	st   store.Store
	m    *Manager
	// src is the source repository; repo its cache entry.
	src  *testutil.Repo
	repo store.Repo
	// configure, if set, adjusts the manager's configuration (backends).
	configure func(*Config)
}

func newHarness(t *testing.T, driver string) *harness {
	t.Helper()
	requireDriver(t, driver)
	h := &harness{t: t, driver: driver, data: t.TempDir(), home: t.TempDir()}
	if q := suiteQuota; q > 0 {
		h.configure = func(c *Config) { c.DiskQuota = q }
	}
	h.open()
	// Registered after t.TempDir, so it runs before the directories go.
	t.Cleanup(h.cleanup)
	h.src = testutil.NewRepo(t, v1Files)
	h.src.Commit(t, "second", mainFiles)
	r, cloned, err := h.m.AddRepo(t.Context(), h.src.Dir, nil)
	if err != nil || !cloned {
		t.Fatalf("AddRepo(%s) = %v, %v", h.src.Dir, cloned, err)
	}
	h.repo = r
	return h
}

// sub is h for a subtest: failures are reported on (and stop) t. The
// manager and store are shared; reopen only through the parent.
func (h *harness) sub(t *testing.T) *harness {
	c := *h
	c.t = t
	return &c
}

func (h *harness) config() Config {
	c := Config{DataDir: h.data, Driver: h.driver, UID: testUID, GID: testGID}
	if h.configure != nil {
		h.configure(&c)
	}
	return c
}

func (h *harness) open() {
	h.t.Helper()
	st, err := sqlstore.Open(context.Background(), filepath.Join(h.data, "agentbox.db"))
	if err != nil {
		h.t.Fatal(err)
	}
	m, err := New(context.Background(), st, h.config())
	if err != nil {
		st.Close()
		h.t.Fatal(err)
	}
	if m.Driver() != h.driver {
		h.t.Fatalf("manager driver = %q, want %q", m.Driver(), h.driver)
	}
	h.st, h.m = st, m
}

// reopen closes the database and starts a new manager on the same data
// dir, as a daemon restart does.
func (h *harness) reopen() {
	h.t.Helper()
	if err := h.st.Close(); err != nil {
		h.t.Fatal(err)
	}
	h.st, h.m = nil, nil
	h.open()
}

// cleanup removes every workspace through the manager, then asserts that
// no mount is left under the data dir (and detaches any, so that a failing
// test does not leave the host littered).
func (h *harness) cleanup() {
	t := h.t
	ctx := context.Background()
	if h.m != nil {
		wss, err := h.st.ListWorkspaces(ctx, "")
		if err != nil {
			t.Errorf("cleanup: listing workspaces: %v", err)
		}
		for _, w := range wss {
			if err := h.m.RemoveWorkspace(ctx, w.ID); err != nil {
				t.Errorf("cleanup: RemoveWorkspace(%s): %v", w.ID, err)
			}
		}
		h.st.Close()
	}
	left := mountsUnder(t, h.data)
	if len(left) > 0 {
		t.Errorf("mounts left under %s: %q", h.data, left)
	}
	for i := len(left) - 1; i >= 0; i-- {
		unix.Unmount(left[i], unix.MNT_DETACH)
	}
}

// create makes a workspace and fails the test on error.
func (h *harness) create(req CreateRequest) store.Workspace {
	h.t.Helper()
	if req.Repo == "" {
		req.Repo = h.repo.ID
	}
	w, err := h.m.CreateWorkspace(h.t.Context(), req)
	if err != nil {
		h.t.Fatalf("CreateWorkspace(%+v): %v", req, err)
	}
	return w
}

func (h *harness) fork(id string, req ForkRequest) store.Workspace {
	h.t.Helper()
	w, err := h.m.ForkWorkspace(h.t.Context(), id, req)
	if err != nil {
		h.t.Fatalf("ForkWorkspace(%s): %v", id, err)
	}
	return w
}

func (h *harness) files(w store.Workspace) string { return h.m.FilesPath(w) }

// agentGit runs plain git in dir as an agent inside a sandbox would: the
// workspace's own .git, its own config, a private $HOME. It fails the test
// on error.
func (h *harness) agentGit(dir string, args ...string) string {
	h.t.Helper()
	out, err := h.agentGitErr(dir, args...)
	if err != nil {
		h.t.Fatalf("git %s in %s: %v\n%s", strings.Join(args, " "), dir, err, out)
	}
	return out
}

func (h *harness) agentGitErr(dir string, args ...string) (string, error) {
	h.t.Helper()
	pre := []string{"-c", "safe.directory=*", "-c", "user.name=Agent", "-c", "user.email=agent@example.invalid"}
	cmd := exec.CommandContext(h.t.Context(), "git", append(pre, args...)...)
	cmd.Dir = dir
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + h.home, "LANG=C", "LC_ALL=C", "GIT_CONFIG_NOSYSTEM=1"}
	out, err := cmd.CombinedOutput()
	// Only the final newline goes: porcelain output starts with a space.
	return strings.TrimRight(string(out), "\n"), err
}

// writeFile writes through the manager's file API.
func (h *harness) writeFile(id, p, content string) {
	h.t.Helper()
	fs, release, err := h.m.Files(h.t.Context(), id, true)
	if err != nil {
		h.t.Fatalf("Files(%s): %v", id, err)
	}
	defer release()
	if _, err := fs.Write(h.t.Context(), p, strings.NewReader(content), 0, true); err != nil {
		h.t.Fatalf("writing %s in %s: %v", p, id, err)
	}
}

func (h *harness) removeFile(id, p string) {
	h.t.Helper()
	fs, release, err := h.m.Files(h.t.Context(), id, true)
	if err != nil {
		h.t.Fatalf("Files(%s): %v", id, err)
	}
	defer release()
	if err := fs.Remove(h.t.Context(), p, false); err != nil {
		h.t.Fatalf("removing %s in %s: %v", p, id, err)
	}
}

// readFile reads through the manager's file API; ok is false when the
// file does not exist.
func (h *harness) readFile(id, p string) (string, bool) {
	h.t.Helper()
	fs, release, err := h.m.Files(h.t.Context(), id, false)
	if err != nil {
		h.t.Fatalf("Files(%s): %v", id, err)
	}
	defer release()
	var b bytes.Buffer
	if _, err := fs.Read(h.t.Context(), p, &b); err != nil {
		if errors.Is(err, errdefs.ErrNotFound) {
			return "", false
		}
		h.t.Fatalf("reading %s in %s: %v", p, id, err)
	}
	return b.String(), true
}

func (h *harness) diff(id string, paths ...string) string {
	h.t.Helper()
	d, err := h.m.Diff(h.t.Context(), id, paths)
	if err != nil {
		h.t.Fatalf("Diff(%s, %q): %v", id, paths, err)
	}
	return string(d)
}

func (h *harness) status(id string) Status {
	h.t.Helper()
	s, err := h.m.Status(h.t.Context(), id)
	if err != nil {
		h.t.Fatalf("Status(%s): %v", id, err)
	}
	return s
}

// events lists the events of one type for one workspace.
func (h *harness) events(id, typ string) []store.Event {
	h.t.Helper()
	evs, err := h.m.Events(context.Background(), store.EventFilter{WorkspaceID: id, Type: typ})
	if err != nil {
		h.t.Fatal(err)
	}
	return evs
}

// snapshot counts what bad input must not change.
type snapshot struct {
	Workspaces, Repos, WorkspaceDirs, RepoDirs, Mounts int
}

func (h *harness) snapshot() snapshot {
	h.t.Helper()
	ctx := context.Background()
	wss, err := h.st.ListWorkspaces(ctx, "")
	if err != nil {
		h.t.Fatal(err)
	}
	repos, err := h.st.ListRepos(ctx)
	if err != nil {
		h.t.Fatal(err)
	}
	return snapshot{
		Workspaces:    len(wss),
		Repos:         len(repos),
		WorkspaceDirs: len(dirNames(h.t, filepath.Join(h.data, "workspaces"))),
		RepoDirs:      len(dirNames(h.t, filepath.Join(h.data, "repos"))),
		Mounts:        len(mountsUnder(h.t, h.data)),
	}
}

// dirNames lists the entries of dir (none when it does not exist).
func dirNames(t *testing.T, dir string) []string {
	t.Helper()
	es, err := os.ReadDir(dir)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	names := []string{}
	for _, e := range es {
		names = append(names, e.Name())
	}
	return names
}

// mountsUnder lists the mount points at or below dir.
func mountsUnder(t testing.TB, dir string) []string {
	t.Helper()
	out, err := mountinfo.Under(dir)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func isMounted(t testing.TB, path string) bool {
	t.Helper()
	for _, mp := range mountsUnder(t, path) {
		if mp == filepath.Clean(path) {
			return true
		}
	}
	return false
}

// within runs f and fails the test if it does not return within d: a
// hostile workspace must never hang a host-side operation.
func within[T any](t *testing.T, d time.Duration, what string, f func() (T, error)) (T, error) {
	t.Helper()
	type result struct {
		v   T
		err error
	}
	ch := make(chan result, 1)
	go func() {
		v, err := f()
		ch <- result{v, err}
	}()
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case r := <-ch:
		return r.v, r.err
	case <-timer.C:
		t.Fatalf("%s did not return within %s", what, d)
		panic("unreachable")
	}
}

// grepTree returns the files under dir (skipping the directories in skip,
// relative to dir) whose content contains any of needles.
func grepTree(t *testing.T, dir string, skip []string, needles ...string) []string {
	t.Helper()
	var hits []string
	err := filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		for _, s := range skip {
			if rel == s {
				return filepath.SkipDir
			}
		}
		if !d.Type().IsRegular() {
			return nil
		}
		f, err := os.Open(p)
		if err != nil {
			return err
		}
		b, err := io.ReadAll(io.LimitReader(f, 16<<20))
		f.Close()
		if err != nil {
			return err
		}
		for _, n := range needles {
			if bytes.Contains(b, []byte(n)) {
				hits = append(hits, rel+": contains "+n)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return hits
}
