// A measurement: it asserts nothing about time, takes minutes, and so is
// built only with -tags measure (scripts/test.sh vets it so).

//go:build measure

package bench

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/agentbox/agentbox/internal/fileapi"
	"github.com/agentbox/agentbox/internal/gitx"
	"github.com/agentbox/agentbox/internal/ids"
	"github.com/agentbox/agentbox/internal/manager"
	"github.com/agentbox/agentbox/internal/repocache"
	"github.com/agentbox/agentbox/internal/store"
	"github.com/agentbox/agentbox/internal/workspace"
)

// stepTimer records named step durations, keeping first-seen order.
type stepTimer struct {
	t     *testing.T
	order []string
	ds    map[string][]time.Duration
}

func (s *stepTimer) time(name string, f func() error) {
	s.t.Helper()
	start := time.Now()
	err := f()
	d := time.Since(start)
	if err != nil {
		s.t.Fatalf("%s: %v", name, err)
	}
	if s.ds == nil {
		s.ds = map[string][]time.Duration{}
	}
	if _, ok := s.ds[name]; !ok {
		s.order = append(s.order, name)
	}
	s.ds[name] = append(s.ds[name], d)
}

func (s *stepTimer) report(w io.Writer, title string) {
	var sum time.Duration
	for _, name := range s.order {
		if !strings.HasPrefix(name, "=") && !strings.HasPrefix(name, "  ") {
			sum += summarize(name, s.ds[name]).Median
		}
	}
	fmt.Fprintf(w, "\n%s\n%-58s %10s %10s %6s\n", title, "step", "median", "p90", "share")
	for _, name := range s.order {
		c := summarize(name, s.ds[name])
		share := ""
		if !strings.HasPrefix(name, "=") && !strings.HasPrefix(name, "  ") && sum > 0 {
			share = fmt.Sprintf("%5.1f%%", 100*float64(c.Median)/float64(sum))
		}
		fmt.Fprintf(w, "%-58s %10s %10s %6s\n", name, fmtDur(c.Median), fmtDur(c.P90), share)
	}
	fmt.Fprintf(w, "%-58s %10s\n", "sum of step medians", fmtDur(sum))
}

func envInt(name string, def int) int {
	if n, err := strconv.Atoi(os.Getenv(name)); err == nil && n > 0 {
		return n
	}
	return def
}

// TestProfile times, step by step, what manager.CreateWorkspace (overlay)
// and manager.ForkWorkspace (overlay) do, by replaying their steps with the
// same functions, next to the real calls:
//
//	go test -tags measure ./internal/bench -run TestProfile -v
//
// AGENTBOX_BENCH_FILES and AGENTBOX_BENCH_RUNS override 20000 and 15.
func TestProfile(t *testing.T) {
	needOverlay(t)
	ctx := context.Background()
	opts := WorkspaceOptions{Files: envInt("AGENTBOX_BENCH_FILES", DefaultFiles), Runs: envInt("AGENTBOX_BENCH_RUNS", DefaultRuns)}.withDefaults()
	h, err := setup(ctx, opts, testLog{t})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := h.close(); err != nil {
			t.Error(err)
		}
	}()
	dataDir := filepath.Join(h.root, "agentbox")
	cache, err := repocache.New(h.st, repocache.Options{ReposDir: filepath.Join(dataDir, "repos"), PristineDir: filepath.Join(dataDir, "pristine"),
		LockDir: filepath.Join(dataDir, "locks"), UID: 1000, GID: 1000})
	if err != nil {
		t.Fatal(err)
	}
	// Warm up: the pristine checkout, and a fork parent with changes.
	parent, err := h.m.CreateWorkspace(ctx, manager.CreateRequest{Repo: h.repo.ID, Ref: "main", Driver: workspace.Overlay})
	if err != nil {
		t.Fatal(err)
	}
	if err := h.modify(ctx, parent.ID); err != nil {
		t.Fatal(err)
	}
	drv, _ := workspace.New(workspace.Overlay)
	wsDir := filepath.Join(dataDir, "workspaces")

	var cr, fk, prim stepTimer
	cr.t, fk.t, prim.t = t, t, t
	for range opts.Runs {
		// Primitives.
		prim.time("exec /bin/true", func() error { return exec.Command("/bin/true").Run() })
		prim.time("exec git version (gitx.Run, hardened)", func() error {
			_, err := gitx.Run(ctx, gitx.Cmd{Hardened: true, Args: []string{"version"}})
			return err
		})
		prim.time("write 4 KiB + fsync file + fsync dir (data dir)", func() error {
			p := filepath.Join(wsDir, "fsync-probe")
			f, err := os.Create(p)
			if err != nil {
				return err
			}
			f.Write(make([]byte, 4096))
			f.Sync()
			f.Close()
			d, _ := os.Open(wsDir)
			d.Sync()
			d.Close()
			return os.Remove(p)
		})
		prim.time("sqlite: one AppendEvent (WAL, synchronous=FULL)", func() error {
			_, err := h.st.AppendEvent(ctx, store.Event{Actor: "bench", Type: "bench.probe"})
			return err
		})

		// The real calls.
		var w store.Workspace
		cr.time("= manager.CreateWorkspace (real call, total)", func() (err error) {
			w, err = h.m.CreateWorkspace(ctx, manager.CreateRequest{Repo: h.repo.ID, Ref: "main", Driver: workspace.Overlay})
			return err
		})
		if err := h.m.RemoveWorkspace(ctx, w.ID); err != nil {
			t.Fatal(err)
		}
		fk.time("= manager.ForkWorkspace (real call, total)", func() (err error) {
			w, err = h.m.ForkWorkspace(ctx, parent.ID, manager.ForkRequest{})
			return err
		})
		if err := h.m.RemoveWorkspace(ctx, w.ID); err != nil {
			t.Fatal(err)
		}

		// CreateWorkspace, replayed step by step (manager.go order).
		var repo store.Repo
		var commit string
		var pristine store.Pristine
		cr.time("store.GetRepo (sqlite read)", func() (err error) { repo, err = h.st.GetRepo(ctx, h.repo.ID); return })
		cr.time("cache.Resolve: git rev-parse main^{commit}", func() (err error) { commit, err = cache.Resolve(ctx, repo, "main"); return })
		cr.time("cache.Pristine (sqlite read + stat)", func() (err error) { pristine, err = cache.Pristine(ctx, repo, commit); return })
		id := ids.New("ws")
		now := time.Now().UTC()
		w = store.Workspace{ID: id, RepoID: repo.ID, PristineID: pristine.ID, Ref: "main", BaseCommit: commit, Branch: "agentbox/" + id,
			Driver: workspace.Overlay, Dir: filepath.Join(wsDir, id), State: store.WorkspaceCreating, CreatedAt: now, UpdatedAt: now}
		cr.time("store.CreateWorkspace (sqlite insert, commit)", func() error { return h.st.CreateWorkspace(ctx, w) })
		cr.time("mkdir workspace dir", func() error { return os.Mkdir(w.Dir, 0o711) })
		cr.time("overlay: mkdir upper, work, merged + lchown upper", func() error {
			for _, sub := range []string{"upper", "work", "merged"} {
				if err := os.Mkdir(filepath.Join(w.Dir, sub), 0o755); err != nil {
					return err
				}
			}
			return os.Lchown(filepath.Join(w.Dir, "upper"), 1000, 1000)
		})
		cr.time("  (of Attach: IsMountPoint, mountinfo scan)", func() error { _, err := workspace.IsMountPoint(filepath.Join(w.Dir, "merged")); return err })
		cr.time("overlay: Attach (mountinfo scan + stat + mount(2))", func() error { return drv.Attach(ctx, w.Dir, pristine.Path) })
		cr.time("overlay: scrubClone (remove .git/logs via the mount)", func() error {
			return os.RemoveAll(filepath.Join(drv.Files(w.Dir), ".git", "logs"))
		})
		hg := workspace.HostGitDir(w.Dir)
		cr.time("InitHostGit: git init --bare", func() error {
			_, err := gitx.Run(ctx, gitx.Cmd{Hardened: true, Args: []string{"init", "--quiet", "--bare", "--template=", hg}})
			return err
		})
		cr.time("InitHostGit: write objects/info/alternates", func() error {
			if err := os.MkdirAll(filepath.Join(hg, "objects", "info"), 0o700); err != nil {
				return err
			}
			return os.WriteFile(filepath.Join(hg, "objects", "info", "alternates"), []byte(filepath.Join(repo.Path, "objects")+"\n"), 0o600)
		})
		seed := filepath.Join(pristine.Path, ".git", "index")
		fi, _ := os.Stat(seed)
		cr.time(fmt.Sprintf("InitHostGit: copy seed index (%.1f MiB)", float64(fi.Size())/(1<<20)), func() error {
			in, err := os.Open(seed)
			if err != nil {
				return err
			}
			defer in.Close()
			out, err := os.OpenFile(filepath.Join(hg, "index"), os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
			if err != nil {
				return err
			}
			if _, err := io.Copy(out, in); err != nil {
				out.Close()
				return err
			}
			return out.Close()
		})
		files := drv.Files(w.Dir)
		var fsys *fileapi.FS
		cr.time("SetBranch: fileapi.Open", func() (err error) { fsys, err = fileapi.Open(files, fileapi.Options{UID: 1000, GID: 1000}); return })
		cr.time("SetBranch: write refs/heads/agentbox/<id> (mkdir, fsync x2)", func() error {
			_, err := fsys.Write(ctx, ".git/refs/heads/"+w.Branch, strings.NewReader(commit+"\n"), 0o644, true)
			return err
		})
		cr.time("SetBranch: write .git/HEAD", func() error {
			_, err := fsys.Write(ctx, ".git/HEAD", strings.NewReader("ref: refs/heads/"+w.Branch+"\n"), 0o644, false)
			return err
		})
		fsys.Close()
		w.State = store.WorkspaceReady
		cr.time("store.UpdateWorkspace (sqlite, commit)", func() error { return h.st.UpdateWorkspace(ctx, w) })
		cr.time("store.TouchPristine (sqlite, commit)", func() error { return h.st.TouchPristine(ctx, pristine.ID, now) })
		cr.time("store.UpdateRepo (sqlite, commit)", func() error { repo.LastUsedAt = now; return h.st.UpdateRepo(ctx, repo) })
		cr.time("store.AppendEvent workspace.created (sqlite, commit)", func() error {
			_, err := h.st.AppendEvent(ctx, store.Event{Actor: "api", Type: "workspace.created", RepoID: repo.ID, WorkspaceID: id})
			return err
		})
		if err := h.m.RemoveWorkspace(ctx, id); err != nil {
			t.Fatal(err)
		}

		// ForkWorkspace (overlay), replayed.
		var par store.Workspace
		fk.time("store.GetWorkspace parent (sqlite read)", func() (err error) { par, err = h.st.GetWorkspace(ctx, parent.ID); return })
		fk.time("store.GetPristine (sqlite read)", func() (err error) { _, err = h.st.GetPristine(ctx, par.PristineID); return })
		cid := ids.New("ws")
		c := par
		c.ID, c.ParentID, c.Branch, c.Dir, c.State = cid, par.ID, "agentbox/"+cid, filepath.Join(wsDir, cid), store.WorkspaceCreating
		fk.time("store.CreateWorkspace (sqlite insert, commit)", func() error { return h.st.CreateWorkspace(ctx, c) })
		fk.time("mkdir dir, work, merged", func() error {
			for _, p := range []string{c.Dir, filepath.Join(c.Dir, "work"), filepath.Join(c.Dir, "merged")} {
				if err := os.Mkdir(p, 0o755); err != nil {
					return err
				}
			}
			return nil
		})
		fk.time("cp -a upper (parent's changes)", func() error {
			return exec.Command("cp", "-a", "--reflink=auto", "--sparse=always", "--", filepath.Join(par.Dir, "upper")+"/.", filepath.Join(c.Dir, "upper")+"/").Run()
		})
		fk.time("overlay: Attach (mountinfo scan + stat + mount(2))", func() error { return drv.Attach(ctx, c.Dir, pristine.Path) })
		fk.time("workspace.ForkHostGit (links the index and objects)", func() error {
			return workspace.ForkHostGit(ctx, par.Dir, c.Dir, h.repo.Path)
		})
		var head string
		fk.time("workspace.Head", func() (err error) { _, head, err = workspace.Head(drv.Files(c.Dir)); return })
		fk.time("SetBranch (fileapi, 2 writes)", func() error { return workspace.SetBranch(ctx, drv.Files(c.Dir), c.Branch, head, 1000, 1000) })
		c.State = store.WorkspaceReady
		fk.time("store.UpdateWorkspace (sqlite, commit)", func() error { return h.st.UpdateWorkspace(ctx, c) })
		fk.time("store.AppendEvent workspace.forked (sqlite, commit)", func() error {
			_, err := h.st.AppendEvent(ctx, store.Event{Actor: "api", Type: "workspace.forked", RepoID: c.RepoID, WorkspaceID: cid})
			return err
		})
		if err := h.m.RemoveWorkspace(ctx, cid); err != nil {
			t.Fatal(err)
		}
	}
	var out strings.Builder
	fmt.Fprintf(&out, "profile: %d files, %d runs", len(h.paths), opts.Runs)
	prim.report(&out, "primitives")
	cr.report(&out, "manager.CreateWorkspace (overlay), step by step")
	fk.report(&out, fmt.Sprintf("manager.ForkWorkspace (overlay, %d changed files), step by step", len(h.changed)))
	t.Log("\n" + out.String())
}
