// Package bench measures agentbox against the plain-git ways of giving an
// agent a private copy of a repository.
//
// Workspace generates a git repository of many small files, then in one
// process and interleaved run by run (so that machine noise hits every case
// alike) times:
//
//	overlay_create  manager.CreateWorkspace with the overlay driver
//	copy_create     manager.CreateWorkspace with the copy driver
//	clone_shared    git clone --shared <mirror> <dir> (alternates + checkout)
//	worktree_add    git worktree add <dir> -b <name> main, from a clone
//	overlay_fork    manager.ForkWorkspace of an overlay workspace with changes
//	copy_fork       manager.ForkWorkspace of a copy workspace with changes
//	overlay_create_quota, overlay_fork_quota
//	                the same with a 10 GiB disk quota (the daemon's
//	                default): the workspace's own ext4 volume is made and
//	                mounted too
//
// plus the one-time cost of the first overlay workspace of a commit, which
// makes the shared pristine checkout. Everything created is removed between
// runs, outside the timed section, and at the end.
package bench

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/agentbox/agentbox/internal/manager"
	"github.com/agentbox/agentbox/internal/store"
	"github.com/agentbox/agentbox/internal/store/sqlstore"
	"github.com/agentbox/agentbox/internal/workspace"
)

// WorkspaceOptions configures Workspace. Zero fields take their defaults.
type WorkspaceOptions struct {
	// Files is the number of files in the generated repo (default 20000).
	Files int
	// Runs is the number of measured runs per case (default 15).
	Runs int
	// Changed is the number of files changed in a workspace before it is
	// forked (default 100; at most Files).
	Changed int
	// DataDir is the scratch directory; default a temporary directory,
	// removed afterwards. A given DataDir is kept, but everything the run
	// made in it is removed.
	DataDir string
}

// Defaults.
const (
	DefaultFiles   = 20000
	DefaultRuns    = 15
	DefaultChanged = 100
)

// Case names. CasePristine is the first overlay create of a commit, which
// makes the shared pristine checkout: a one-time cost per commit, measured
// once (it includes that one overlay create).
const (
	CasePristine      = "pristine_checkout (once)"
	CaseOverlayCreate = "overlay_create"
	CaseCopyCreate    = "copy_create"
	CaseCloneShared   = "clone_shared"
	CaseWorktreeAdd   = "worktree_add"
	CaseOverlayFork   = "overlay_fork"
	CaseCopyFork      = "copy_fork"
	// With the daemon's default disk quota.
	CaseOverlayCreateQuota = "overlay_create_quota"
	CaseOverlayForkQuota   = "overlay_fork_quota"
)

// benchQuota is the disk quota of the _quota cases: the daemon's default.
const benchQuota = 10 << 30

// Targets printed next to the results.
const (
	TargetOverlayCreate = 20 * time.Millisecond
	TargetOverlayFork   = 20 * time.Millisecond
	// TargetCloneRatio is how many times faster than git clone --shared an
	// overlay create should be.
	TargetCloneRatio = 50.0
)

// Case is the timing of one measured operation.
type Case struct {
	Name   string        `json:"name"`
	Median time.Duration `json:"median_ns"`
	P90    time.Duration `json:"p90_ns"`
	Runs   int           `json:"runs"`
}

// WorkspaceResult is what Workspace measured.
type WorkspaceResult struct {
	// Files is the number of files in the generated repo.
	Files int `json:"files"`
	// RepoBytes is the total size of those files (a checkout's content).
	RepoBytes int64 `json:"repo_bytes"`
	// Changed is the number of files changed in a fork parent.
	Changed int `json:"changed"`
	// RCUExpedited is the kernel's /sys/kernel/rcu_expedited ("" when it
	// cannot be read): a quota fork of a parent with many files freezes
	// its volume, which waits for RCU grace periods, much shorter when
	// expedited.
	RCUExpedited string `json:"rcu_expedited,omitempty"`
	// Cases are in a fixed order: the one-time pristine checkout, then
	// creates, baselines and forks.
	Cases []Case `json:"cases"`
	// Ratios are median over median, keyed "a/b", e.g.
	// "clone_shared/overlay_create": 85.2 means overlay create is 85.2
	// times faster than git clone --shared.
	Ratios map[string]float64 `json:"ratios"`
}

// ratioDefs are the ratios reported, in print order.
var ratioDefs = [][2]string{
	{CaseCloneShared, CaseOverlayCreate},
	{CaseWorktreeAdd, CaseOverlayCreate},
	{CaseCloneShared, CaseCopyCreate},
	{CaseCopyCreate, CaseOverlayCreate},
	{CaseCopyFork, CaseOverlayFork},
	{CaseOverlayCreateQuota, CaseOverlayCreate},
	{CaseOverlayForkQuota, CaseOverlayFork},
}

// caseOrder is the order of the measured cases in the result.
var caseOrder = []string{CaseOverlayCreate, CaseCopyCreate, CaseCloneShared, CaseWorktreeAdd, CaseOverlayFork, CaseCopyFork, CaseOverlayCreateQuota, CaseOverlayForkQuota}

// Workspace runs the workspace benchmark. log receives progress lines (nil
// discards them). Workspaces, clones and mounts it made are removed before
// it returns, also on error or cancellation.
func Workspace(ctx context.Context, opts WorkspaceOptions, log io.Writer) (res WorkspaceResult, err error) {
	opts = opts.withDefaults()
	if opts.Files < 1 || opts.Runs < 1 || opts.Changed < 0 {
		return res, fmt.Errorf("bench: files (%d) and runs (%d) must be positive and changed (%d) not negative", opts.Files, opts.Runs, opts.Changed)
	}
	if log == nil {
		log = io.Discard
	}
	h, err := setup(ctx, opts, log)
	if err != nil {
		return res, err
	}
	defer func() {
		if cerr := h.close(); cerr != nil {
			err = errors.Join(err, cerr)
		}
	}()
	res.Files = len(h.paths)
	res.RepoBytes = h.treeBytes
	res.Changed = len(h.changed)
	res.RCUExpedited = workspace.RCUExpedited()

	// The first overlay workspace of a commit makes the pristine checkout.
	h.logf("warm-up: first overlay workspace (makes the pristine checkout)")
	start := time.Now()
	w, err := h.m.CreateWorkspace(ctx, manager.CreateRequest{Repo: h.repo.ID, Ref: "main", Driver: workspace.Overlay, Task: "bench"})
	once := time.Since(start)
	if err != nil {
		return res, fmt.Errorf("bench: first overlay workspace: %w", err)
	}
	if err := h.checkTree(h.m.FilesPath(w)); err != nil {
		return res, err
	}
	if err := h.m.RemoveWorkspace(ctx, w.ID); err != nil {
		return res, err
	}
	h.logf("pristine checkout (once): %s", fmtDur(once))

	runners, err := h.runners(ctx)
	if err != nil {
		return res, err
	}
	// One untimed pass warms caches and checks each case's output.
	h.logf("warm-up: one untimed run of each case")
	for _, r := range runners {
		if _, err := r.once(ctx, -1, true); err != nil {
			return res, err
		}
	}
	times := map[string][]time.Duration{}
	// Every round runs each case once, in an order shuffled per round
	// (fixed seed) so that neither slow drift of the machine, nor position
	// in the round, nor the case run just before favours a case.
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range opts.Runs {
		if err := ctx.Err(); err != nil {
			return res, err
		}
		var line strings.Builder
		for _, k := range rng.Perm(len(runners)) {
			r := runners[k]
			d, err := r.once(ctx, i, false)
			if err != nil {
				return res, err
			}
			times[r.name] = append(times[r.name], d)
			fmt.Fprintf(&line, " %s=%s", r.name, fmtDur(d))
		}
		h.logf("run %d/%d:%s", i+1, opts.Runs, line.String())
	}

	res.Cases = append(res.Cases, Case{Name: CasePristine, Median: once, P90: once, Runs: 1})
	for _, name := range caseOrder {
		res.Cases = append(res.Cases, summarize(name, times[name]))
	}
	res.Ratios = ratios(res.Cases)
	return res, nil
}

func (o WorkspaceOptions) withDefaults() WorkspaceOptions {
	if o.Files == 0 {
		o.Files = DefaultFiles
	}
	if o.Runs == 0 {
		o.Runs = DefaultRuns
	}
	if o.Changed == 0 {
		o.Changed = DefaultChanged
	}
	if o.Changed > o.Files {
		o.Changed = o.Files
	}
	return o
}

// summarize computes the median and the 90th percentile (nearest rank).
func summarize(name string, ds []time.Duration) Case {
	c := Case{Name: name, Runs: len(ds)}
	if len(ds) == 0 {
		return c
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	n := len(s)
	if n%2 == 1 {
		c.Median = s[n/2]
	} else {
		c.Median = (s[n/2-1] + s[n/2]) / 2
	}
	rank := (9*n + 9) / 10 // ceil(0.9 n)
	c.P90 = s[rank-1]
	return c
}

func ratios(cases []Case) map[string]float64 {
	med := map[string]time.Duration{}
	for _, c := range cases {
		med[c.Name] = c.Median
	}
	out := map[string]float64{}
	for _, rd := range ratioDefs {
		a, okA := med[rd[0]]
		b, okB := med[rd[1]]
		if okA && okB && b > 0 {
			out[rd[0]+"/"+rd[1]] = float64(a) / float64(b)
		}
	}
	return out
}

// --- the environment

// harness is one benchmark's scratch space, repo and manager.
type harness struct {
	log       io.Writer
	root      string // DataDir
	tempRoot  bool   // root is ours to remove
	made      []string
	src       string // generated bare repo
	baseDir   string // baseline clones and worktrees
	wtBase    string // non-bare clone that worktrees are added to
	paths     []string
	treeBytes int64
	changed   []string // paths modified in fork parents
	st        *sqlstore.Store
	m         *manager.Manager
	repo      store.Repo
}

func (h *harness) logf(format string, args ...any) {
	fmt.Fprintf(h.log, "bench: "+format+"\n", args...)
}

func setup(ctx context.Context, opts WorkspaceOptions, log io.Writer) (_ *harness, err error) {
	h := &harness{log: log}
	if opts.DataDir == "" {
		if h.root, err = os.MkdirTemp("", "agentbox-bench-"); err != nil {
			return nil, err
		}
		h.tempRoot = true
	} else {
		if h.root, err = filepath.Abs(opts.DataDir); err != nil {
			return nil, err
		}
		if err := os.MkdirAll(h.root, 0o755); err != nil {
			return nil, err
		}
	}
	// Resolve symlinks (a /tmp link) so that mount points under root are
	// recognised in mountinfo.
	if h.root, err = filepath.EvalSymlinks(h.root); err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			err = errors.Join(err, h.close())
		}
	}()
	h.src = filepath.Join(h.root, "source.git")
	h.baseDir = filepath.Join(h.root, "baseline")
	dataDir := filepath.Join(h.root, "agentbox")
	for _, p := range []string{h.src, h.baseDir, dataDir} {
		if _, err := os.Lstat(p); err == nil {
			return nil, fmt.Errorf("bench: %s already exists (left by another run?); use an empty data dir", p)
		}
		h.made = append(h.made, p)
	}
	if err := os.Mkdir(h.baseDir, 0o755); err != nil {
		return nil, err
	}

	start := time.Now()
	if h.paths, h.treeBytes, err = generateRepo(ctx, h.src, opts.Files); err != nil {
		return nil, err
	}
	h.logf("generated %d files (%.1f MiB) in %s", len(h.paths), float64(h.treeBytes)/(1<<20), time.Since(start).Round(time.Millisecond))
	for i := range opts.Changed {
		h.changed = append(h.changed, h.paths[i*len(h.paths)/opts.Changed])
	}

	if err := os.Mkdir(dataDir, 0o700); err != nil {
		return nil, err
	}
	if h.st, err = sqlstore.Open(ctx, filepath.Join(dataDir, "agentbox.db")); err != nil {
		return nil, err
	}
	if h.m, err = manager.New(ctx, h.st, manager.Config{DataDir: dataDir, Driver: workspace.Overlay, UID: 1000, GID: 1000}); err != nil {
		return nil, fmt.Errorf("bench: %w", err)
	}
	start = time.Now()
	if h.repo, _, err = h.m.AddRepo(ctx, h.src, nil); err != nil {
		return nil, fmt.Errorf("bench: adding repo: %w", err)
	}
	h.logf("added repo %s (mirror %.1f MiB) in %s", h.repo.ID, float64(h.repo.SizeBytes)/(1<<20), time.Since(start).Round(time.Millisecond))

	h.wtBase = filepath.Join(h.baseDir, "worktree-base")
	if err := runGit(ctx, "", "clone", "--quiet", "--", h.repo.Path, h.wtBase); err != nil {
		return nil, err
	}
	return h, nil
}

// close removes every workspace through the manager (unmounting them),
// then the files; it reports, and detaches, any mount left under root.
func (h *harness) close() error {
	ctx := context.Background()
	var errs []error
	if h.m != nil {
		wss, err := h.m.ListWorkspaces(ctx, manager.ListFilter{})
		errs = append(errs, err)
		for _, w := range wss {
			errs = append(errs, h.m.RemoveWorkspace(ctx, w.ID))
		}
		h.m = nil
	}
	if h.st != nil {
		errs = append(errs, h.st.Close())
		h.st = nil
	}
	if h.root == "" {
		return errors.Join(errs...)
	}
	left, err := mountsUnder(h.root)
	errs = append(errs, err)
	if len(left) > 0 {
		errs = append(errs, fmt.Errorf("bench: mounts left under %s after removing all workspaces: %s", h.root, strings.Join(left, ", ")))
		// Never let RemoveAll descend into a mounted tree.
		for i := len(left) - 1; i >= 0; i-- {
			detach(left[i])
		}
		if again, _ := mountsUnder(h.root); len(again) > 0 {
			return errors.Join(errs...) // keep the files rather than delete through a mount
		}
	}
	if h.tempRoot {
		errs = append(errs, os.RemoveAll(h.root))
	} else {
		for _, p := range h.made {
			errs = append(errs, os.RemoveAll(p))
		}
	}
	h.root = ""
	return errors.Join(errs...)
}

// --- the generated repo

// generateRepo makes a bare repository at dir whose branch main holds n
// small source-like files in nested directories, in one commit written by
// git fast-import. It returns the paths and their total size.
func generateRepo(ctx context.Context, dir string, n int) ([]string, int64, error) {
	if err := runGit(ctx, "", "init", "--quiet", "--bare", "--initial-branch=main", dir); err != nil {
		return nil, 0, err
	}
	cmd := gitCommand(ctx, "", "--git-dir="+dir, "fast-import", "--quiet", "--done")
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, 0, err
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		return nil, 0, err
	}
	paths, total, werr := writeFastImport(stdin, n)
	stdin.Close()
	if err := cmd.Wait(); err != nil || werr != nil {
		return nil, 0, fmt.Errorf("bench: generating repo: git fast-import: %v %v: %s", err, werr, strings.TrimSpace(stderr.String()))
	}
	return paths, total, nil
}

func writeFastImport(out io.Writer, n int) ([]string, int64, error) {
	w := bufio.NewWriterSize(out, 1<<20)
	rng := rand.New(rand.NewPCG(uint64(n), 0x61676e74626f78))
	msg := fmt.Sprintf("bench: %d generated files\n", n)
	fmt.Fprintf(w, "commit refs/heads/main\nauthor Bench <bench@agentbox.invalid> 1700000000 +0000\ncommitter Bench <bench@agentbox.invalid> 1700000000 +0000\ndata %d\n%s", len(msg), msg)
	paths := make([]string, 0, n)
	var total int64
	var body []byte
	// 40 files per directory, 16 directories per module, every third
	// directory one level deeper: a tree shaped like a source repo.
	for i := range n {
		leaf := i / 40
		mod, pkg := leaf/16, leaf%16
		var p string
		if pkg%3 == 2 {
			p = fmt.Sprintf("mod%03d/pkg%02d/internal/file%05d.go", mod, pkg, i)
		} else {
			p = fmt.Sprintf("mod%03d/pkg%02d/file%05d.go", mod, pkg, i)
		}
		paths = append(paths, p)
		body = fileContent(body[:0], rng, pkg, i)
		total += int64(len(body))
		fmt.Fprintf(w, "M 100644 inline %s\ndata %d\n", p, len(body))
		w.Write(body)
		w.WriteByte('\n')
	}
	w.WriteString("done\n")
	return paths, total, w.Flush()
}

// fileContent appends a Go-like file of 200 to 2000 bytes.
func fileContent(b []byte, rng *rand.Rand, pkg, i int) []byte {
	size := 200 + rng.IntN(1800)
	b = fmt.Appendf(b, "package pkg%02d\n\n// File %d is generated by agentbox bench.\n", pkg, i)
	for j := 0; len(b) < size; j++ {
		b = fmt.Appendf(b, "\nfunc f%d_%d(x int) int {\n\treturn x*%d + %d\n}\n", i, j, rng.IntN(1000), rng.IntN(1<<20))
	}
	return b
}

// gitCommand runs git without the user's or system's configuration, so
// that the baselines are the same on every machine.
func gitCommand(ctx context.Context, dir string, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, "git", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL=/dev/null", "LC_ALL=C", "GIT_TERMINAL_PROMPT=0")
	return cmd
}

func runGit(ctx context.Context, dir string, args ...string) error {
	out, err := gitCommand(ctx, dir, args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("bench: git %s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

// --- the cases

// runner is one measured case: run is timed; undo (its result's removal)
// and the write-back after it are not.
type runner struct {
	name  string
	run   func(ctx context.Context, i int) (undo func() error, err error)
	check func(i int) error // optional, after the warm-up run
}

// once runs r, returning the timed duration; i < 0 is the warm-up.
func (r runner) once(ctx context.Context, i int, check bool) (time.Duration, error) {
	start := time.Now()
	undo, err := r.run(ctx, i)
	d := time.Since(start)
	if err != nil {
		return d, fmt.Errorf("bench: %s: %w", r.name, err)
	}
	if check && r.check != nil {
		err = r.check(i)
	}
	if uerr := undo(); uerr != nil {
		err = errors.Join(err, fmt.Errorf("bench: %s: cleaning up: %w", r.name, uerr))
	}
	// Write back what this run and its removal left dirty, so that the
	// next timed run does not pay for it.
	quiesce()
	return d, err
}

func (h *harness) runners(ctx context.Context) ([]runner, error) {
	// Fork parents: one workspace per driver with Changed files modified
	// through the file API, as an agent would.
	parents := map[string]store.Workspace{}
	for _, drv := range []string{workspace.Overlay, workspace.Copy, workspace.Overlay + "+quota"} {
		req := manager.CreateRequest{Repo: h.repo.ID, Ref: "main", Driver: drv, Task: "bench-parent"}
		if drv == workspace.Overlay+"+quota" {
			req.Driver, req.Disk = workspace.Overlay, benchQuota
		}
		w, err := h.m.CreateWorkspace(ctx, req)
		if err != nil {
			return nil, fmt.Errorf("bench: fork parent (%s): %w", drv, err)
		}
		if err := h.modify(ctx, w.ID); err != nil {
			return nil, err
		}
		parents[drv] = w
	}
	h.logf("fork parents ready with %d changed files each", len(h.changed))

	var last store.Workspace // the latest workspace made, for checks
	create := func(drv string) func(context.Context, int) (func() error, error) {
		return func(ctx context.Context, _ int) (func() error, error) {
			req := manager.CreateRequest{Repo: h.repo.ID, Ref: "main", Driver: drv, Task: "bench"}
			if drv == workspace.Overlay+"+quota" {
				req.Driver, req.Disk = workspace.Overlay, benchQuota
			}
			w, err := h.m.CreateWorkspace(ctx, req)
			if err != nil {
				return nil, err
			}
			last = w
			return func() error { return h.m.RemoveWorkspace(context.WithoutCancel(ctx), w.ID) }, nil
		}
	}
	fork := func(drv string) func(context.Context, int) (func() error, error) {
		return func(ctx context.Context, _ int) (func() error, error) {
			w, err := h.m.ForkWorkspace(ctx, parents[drv].ID, manager.ForkRequest{Task: "bench"})
			if err != nil {
				return nil, err
			}
			last = w
			return func() error { return h.m.RemoveWorkspace(context.WithoutCancel(ctx), w.ID) }, nil
		}
	}
	checkCreate := func(int) error { return h.checkTree(h.m.FilesPath(last)) }
	checkFork := func(int) error { return h.checkFork(h.m.FilesPath(last)) }
	dirOf := func(kind string, i int) string {
		if i < 0 {
			return filepath.Join(h.baseDir, kind+"-warmup")
		}
		return filepath.Join(h.baseDir, fmt.Sprintf("%s-%02d", kind, i))
	}
	return []runner{
		{name: CaseOverlayCreate, run: create(workspace.Overlay), check: checkCreate},
		{name: CaseCopyCreate, run: create(workspace.Copy), check: checkCreate},
		{name: CaseCloneShared, run: func(ctx context.Context, i int) (func() error, error) {
			dir := dirOf("clone", i)
			if err := runGit(ctx, "", "clone", "--shared", "--quiet", "--", h.repo.Path, dir); err != nil {
				return nil, err
			}
			return func() error { return os.RemoveAll(dir) }, nil
		}, check: func(i int) error { return h.checkTree(dirOf("clone", i)) }},
		{name: CaseWorktreeAdd, run: func(ctx context.Context, i int) (func() error, error) {
			dir, branch := dirOf("worktree", i), fmt.Sprintf("bench-%d", i+1)
			if err := runGit(ctx, h.wtBase, "worktree", "add", "--quiet", dir, "-b", branch, "main"); err != nil {
				return nil, err
			}
			return func() error {
				ctx := context.WithoutCancel(ctx)
				return errors.Join(runGit(ctx, h.wtBase, "worktree", "remove", "--force", dir),
					runGit(ctx, h.wtBase, "branch", "--quiet", "-D", branch))
			}, nil
		}, check: func(i int) error { return h.checkTree(dirOf("worktree", i)) }},
		{name: CaseOverlayFork, run: fork(workspace.Overlay), check: checkFork},
		{name: CaseCopyFork, run: fork(workspace.Copy), check: checkFork},
		{name: CaseOverlayCreateQuota, run: create(workspace.Overlay + "+quota"), check: checkCreate},
		{name: CaseOverlayForkQuota, run: fork(workspace.Overlay + "+quota"), check: checkFork},
	}, nil
}

// changedContent is what modify writes to path.
func changedContent(path string) string {
	return "package changed\n\n// " + path + " was modified by agentbox bench.\n"
}

// modify rewrites h.changed in workspace id through the file API.
func (h *harness) modify(ctx context.Context, id string) error {
	fsys, release, err := h.m.Files(ctx, id, true)
	if err != nil {
		return err
	}
	defer release()
	for _, p := range h.changed {
		if _, err := fsys.Write(ctx, p, strings.NewReader(changedContent(p)), 0, false); err != nil {
			return fmt.Errorf("bench: modifying %s: %w", p, err)
		}
		h.m.FileChanged(ctx, id, "write", p)
	}
	return nil
}

// checkTree verifies that files holds a checkout of the generated repo.
func (h *harness) checkTree(files string) error {
	for _, p := range []string{h.paths[0], h.paths[len(h.paths)-1], ".git"} {
		if _, err := os.Stat(filepath.Join(files, p)); err != nil {
			return fmt.Errorf("bench: checkout %s is incomplete: %w", files, err)
		}
	}
	return nil
}

// checkFork verifies that a fork carries its parent's changes.
func (h *harness) checkFork(files string) error {
	if err := h.checkTree(files); err != nil {
		return err
	}
	for _, p := range h.changed {
		b, err := os.ReadFile(filepath.Join(files, p))
		if err != nil {
			return fmt.Errorf("bench: fork %s: %w", files, err)
		}
		if string(b) != changedContent(p) {
			return fmt.Errorf("bench: fork %s: %s does not carry the parent's change", files, p)
		}
	}
	return nil
}

// --- output

// Print writes a readable table of the cases, the ratios and the targets.
func (r WorkspaceResult) Print(w io.Writer) {
	runs := 0
	for _, c := range r.Cases {
		runs = max(runs, c.Runs)
	}
	fmt.Fprintf(w, "agentbox workspace benchmark: %d files, %.1f MiB, %d runs per case, %d files changed in fork parents", r.Files, float64(r.RepoBytes)/(1<<20), runs, r.Changed)
	if r.RCUExpedited != "" {
		fmt.Fprintf(w, ", rcu_expedited=%s", r.RCUExpedited)
	}
	fmt.Fprintf(w, "\n\n")
	fmt.Fprintf(w, "%-26s %5s %12s %12s\n", "case", "runs", "median", "p90")
	for _, c := range r.Cases {
		fmt.Fprintf(w, "%-26s %5d %12s %12s\n", c.Name, c.Runs, fmtDur(c.Median), fmtDur(c.P90))
	}
	med := map[string]time.Duration{}
	for _, c := range r.Cases {
		med[c.Name] = c.Median
	}
	fmt.Fprintf(w, "\n%-30s %10s  %s\n", "ratio (median/median)", "value", "target")
	for _, rd := range ratioDefs {
		key := rd[0] + "/" + rd[1]
		v, ok := r.Ratios[key]
		if !ok {
			continue
		}
		target := ""
		if key == CaseCloneShared+"/"+CaseOverlayCreate {
			target = fmt.Sprintf(">= %.0fx  %s", TargetCloneRatio, verdict(v >= TargetCloneRatio))
		}
		fmt.Fprintf(w, "%-30s %9.1fx  %s\n", key, v, target)
	}
	fmt.Fprintf(w, "\n%-30s %10s  %s\n", "target", "median", "")
	for _, t := range []struct {
		name   string
		target time.Duration
	}{{CaseOverlayCreate, TargetOverlayCreate}, {CaseOverlayFork, TargetOverlayFork}} {
		if d, ok := med[t.name]; ok {
			fmt.Fprintf(w, "%-30s %10s  <= %s  %s\n", t.name, fmtDur(d), fmtDur(t.target), verdict(d <= t.target))
		}
	}
}

func verdict(ok bool) string {
	if ok {
		return "ok"
	}
	return "MISSED"
}

func fmtDur(d time.Duration) string {
	ms := float64(d) / float64(time.Millisecond)
	if ms < 100 {
		return fmt.Sprintf("%.2f ms", ms)
	}
	return fmt.Sprintf("%.1f ms", ms)
}
