// Package manager owns the lifecycle of repos and workspaces: it keeps the
// database and the disk in step, rolls back every half-made object, and on
// start repairs what a crash or a reboot left (unfinished creates and
// removals, missing mounts). The API layer calls it; it knows nothing of
// HTTP.
package manager

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/agentbox/agentbox/internal/apitypes"
	"github.com/agentbox/agentbox/internal/archive"
	"github.com/agentbox/agentbox/internal/diffcheck"
	"github.com/agentbox/agentbox/internal/errdefs"
	"github.com/agentbox/agentbox/internal/fileapi"
	"github.com/agentbox/agentbox/internal/forge/forgeapi"
	"github.com/agentbox/agentbox/internal/ids"
	"github.com/agentbox/agentbox/internal/logx"
	"github.com/agentbox/agentbox/internal/policy"
	"github.com/agentbox/agentbox/internal/repocache"
	"github.com/agentbox/agentbox/internal/sandbox"
	"github.com/agentbox/agentbox/internal/store"
	"github.com/agentbox/agentbox/internal/workspace"
)

// Log keys, constant across the daemon.
const (
	KeyWorkspace = "workspace_id"
	KeyRepo      = "repo_id"
)

// DefaultGuestUID and DefaultGuestGID are the guest's own user unless the
// configuration names one: a uid no distribution hands out and no image
// uses, just below nobody (65534).
const (
	DefaultGuestUID = 65533
	DefaultGuestGID = 65533
)

// Config configures a Manager.
type Config struct {
	// DataDir holds repos/, pristine/, workspaces/, locks/.
	DataDir string
	// Driver is "auto", "overlay" or "copy".
	Driver string
	// UID and GID own workspace files (the sandbox user); -1 leaves them
	// to the daemon's user.
	UID, GID int
	// GuestUID and GuestGID are the guest's own user, apart from UID/GID
	// (SECURITY.md H44): each sandbox's run directory and the daemon's
	// sockets in it belong to it, and commands can reach neither those
	// nor the guest's process. 0 (with UID set): DefaultGuestUID and
	// DefaultGuestGID; -1: none, the guest runs as the sandbox user.
	GuestUID, GuestGID int
	// Author signs commits made through the API unless the caller names one.
	Author workspace.Author
	// GitTimeout bounds host-side git operations on one workspace.
	GitTimeout time.Duration
	// MaxDiffBytes caps a diff.
	MaxDiffBytes int64
	// DiskQuota is the disk quota in bytes of a new workspace whose request
	// names none (a fork's default is its parent's); 0: no quota.
	DiskQuota int64
	// Logger is the daemon's logger.
	Logger *slog.Logger

	// Backends are the execution backends by name.
	Backends map[string]sandbox.Backend
	// Unavailable are backends this daemon knows but cannot use here, with
	// the reason (an engine that does not answer), so that a sandbox that
	// asks for one is told why.
	Unavailable map[string]string
	// DefaultBackend and DefaultImage complete a sandbox spec that names
	// neither.
	DefaultBackend, DefaultImage string
	// GuestBinary is the host path of the static agentbox-guest binary.
	GuestBinary string
	// GuestConnectTimeout bounds the wait for a new sandbox's guest to
	// connect (default 30s).
	GuestConnectTimeout time.Duration
	// Ceilings bound what a sandbox's policy may ask for; zero means
	// policy.DefaultCeilings().
	Ceilings *policy.Ceilings

	// Egress serves the proxy traffic of sandboxes with network access
	// (the daemon's *egress.Proxy); nil refuses every policy that allows
	// any.
	Egress Egress
	// Dependencies admits the packages an agent asks for (the daemon's
	// *deps.Admitter over its approved manifest); nil admits none.
	Dependencies Dependencies
	// Secrets is the daemon's secret store (*secrets.Box); nil: none.
	Secrets Secrets
	// Forges reaches a forge's pull request API (forge.Open in the daemon);
	// nil: no pull requests. A function, so that the manager stays free of
	// net/http (see imports_test.go).
	Forges forgeapi.NewFunc
	// Intercept, with Secrets, lets policies bind secrets: it extends a
	// sandbox's allowlist with what swaps the values in at the egress
	// proxy (package egress/mitm) and returns the placeholder each secret
	// has in that sandbox. nil refuses every policy with secrets.
	Intercept func(allow Allowlist, secrets []BoundSecret) (Allowlist, map[string]string, error)
	// CABundle is the PEM a sandbox with secrets must trust: the usual
	// roots and the daemon's interception CA.
	CABundle []byte
	// IdleTimeout, when positive, lets Evict stop a sandbox with no API
	// activity and no command running for that long.
	IdleTimeout time.Duration
	// MaxAge, when positive, lets Evict stop a sandbox that long after it
	// started, whatever it does.
	MaxAge time.Duration
	// Observer is told how long sandbox creations and execs take and how
	// execs end (the daemon's metrics); nil: nothing is observed. If it is
	// also a GCObserver, it is told of the collector's removals; if it is
	// a PoolObserver too, it is told the warm pools' sizes and claims.
	Observer Observer
	// DataBudget, when positive, is the disk the data dir may take, in
	// bytes: GC collects down to it (see gc.go).
	DataBudget int64
	// WorkspaceRetention, when positive, lets GC remove a clean workspace
	// unused for that long; without it GC removes no workspace.
	WorkspaceRetention time.Duration
	// WarmPool lists the warm pools to keep filled (see pool.go).
	WarmPool []PoolSpec
	// AutoApprove approves a candidate at once when every check passed
	// (see Review); without it, a person decides.
	AutoApprove bool
	// PushBranch is the template of the branch a push goes to (see
	// DefaultPushBranch); empty: the default.
	PushBranch string
	// NodeID is this daemon's node among those sharing the store (see
	// ownership.go): it owns the workspaces and sandboxes it makes, and
	// touches no other's. Empty: the manager owns everything.
	NodeID string
}

// Observer receives the manager's measurements. The manager holds only
// this, so that the lifecycle core stays free of the metrics library
// (which depends on HTTP).
type Observer interface {
	// ObserveCreate is called once per CreateSandbox with its wall time
	// and its error.
	ObserveCreate(backend string, d time.Duration, err error)
	// ObserveExec is called once per command run with its wall time and
	// its outcome: one of the Outcome constants.
	ObserveExec(backend string, d time.Duration, outcome string)
}

// How an exec ended, as an Observer is told.
const (
	OutcomeOK      = "ok"
	OutcomeNonZero = "nonzero"
	OutcomeTimeout = "timeout"
	OutcomeOOM     = "oom"
	OutcomeKilled  = "killed"
	OutcomeLost    = "lost"
)

// Manager is the lifecycle owner. Its methods are safe for concurrent use.
type Manager struct {
	cfg     Config
	st      store.Store
	cache   *repocache.Cache
	log     *slog.Logger
	driver  string // resolved default driver
	wsDir   string
	locksMu sync.Mutex
	locks   map[string]*keyLock
	// live holds the guest connections of running sandboxes, by ID.
	liveMu sync.Mutex
	live   map[string]*live
	// procs holds the background processes (process.go).
	procs procTable
	// execs holds the ordinary execs' live output (execlive.go).
	execs execTable
	// attachMu makes checking and making a mount one step, so that two
	// operations never stack two overlays on one workspace and a removal
	// never races a re-mount.
	attachMu sync.Mutex
	// rec is the reconciler's state (reconcile.go).
	rec reconcileState

	// gcMu makes collections one at a time; touched maps workspace IDs
	// to the start of their last operation (see touch).
	gcMu    sync.Mutex
	touched sync.Map
	// events tells event followers of appends.
	events *eventBus
	// pool holds the warm pools' ready environments.
	pool *warmPool
	// egressLog queues the egress proxy's decisions for the event log.
	egressLog egressLog
	// hostPathWarned remembers which warnings of hideHostPaths were
	// logged.
	hostPathWarned sync.Map

	// failAt, when set by tests, is called at each named step of a
	// multi-step operation and may return an error to inject a failure.
	failAt func(step string) error
}

// New opens a manager over st, resolving the driver and repairing the
// state a crash or reboot left before returning.
func New(ctx context.Context, st store.Store, cfg Config) (*Manager, error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	switch {
	case cfg.UID < 0 || cfg.GuestUID < 0 && cfg.GuestGID < 0:
		// Without a sandbox user the daemon cannot hand a guest user
		// anything either.
		cfg.GuestUID, cfg.GuestGID = 0, 0
	case cfg.GuestUID == 0 && cfg.GuestGID == 0:
		cfg.GuestUID, cfg.GuestGID = DefaultGuestUID, DefaultGuestGID
	}
	if err := (sandbox.CreateRequest{UID: cfg.UID, GuestUID: cfg.GuestUID, GuestGID: cfg.GuestGID}).CheckGuestUser(); err != nil {
		return nil, err
	}
	if cfg.Author.Name == "" {
		cfg.Author = workspace.Author{Name: "agentbox", Email: "agentbox@localhost"}
	}
	bus := newEventBus()
	st = notifyingStore{Store: st, bus: bus}
	if cfg.NodeID != "" {
		st = owningStore{Store: st, node: cfg.NodeID}
		// Rows from before nodes (a daemon alone on its store) are the
		// first node's to serve.
		if n, err := st.ClaimUnowned(ctx, cfg.NodeID); err != nil {
			return nil, err
		} else if n > 0 {
			cfg.Logger.InfoContext(ctx, "claimed the workspaces and sandboxes no node owned", "node_id", cfg.NodeID, "rows", n)
		}
	}
	m := &Manager{cfg: cfg, st: st, events: bus, log: cfg.Logger, wsDir: filepath.Join(cfg.DataDir, "workspaces"), locks: map[string]*keyLock{}, live: map[string]*live{}}
	if err := os.MkdirAll(m.wsDir, 0o711); err != nil {
		return nil, err
	}
	cache, err := repocache.New(st, repocache.Options{
		ReposDir: filepath.Join(cfg.DataDir, "repos"), PristineDir: filepath.Join(cfg.DataDir, "pristine"),
		LockDir: filepath.Join(cfg.DataDir, "locks"), UID: cfg.UID, GID: cfg.GID, Logger: cfg.Logger,
	})
	if err != nil {
		return nil, err
	}
	m.cache = cache
	switch cfg.Driver {
	case "", "auto":
		if err := workspace.ProbeOverlay(m.wsDir); err != nil {
			m.log.WarnContext(ctx, "overlay unavailable, using the copy driver", "err", err)
			m.driver = workspace.Copy
		} else {
			m.driver = workspace.Overlay
		}
	case workspace.Overlay:
		if err := workspace.ProbeOverlay(m.wsDir); err != nil {
			return nil, fmt.Errorf("workspace driver overlay configured but unusable in %s: %w", m.wsDir, err)
		}
		m.driver = workspace.Overlay
	case workspace.Copy:
		m.driver = workspace.Copy
	default:
		return nil, errdefs.Invalid("workspace driver %q is not one of auto, overlay, copy", cfg.Driver)
	}
	// A quota the daemon cannot enforce is an error at start, not a
	// workspace that silently has none.
	if cfg.DiskQuota > 0 {
		if err := workspace.ProbeVolume(ctx, m.wsDir, m.templates()); err != nil {
			return nil, fmt.Errorf("workspace disk quotas are configured but do not work in %s (set workspace_disk_quota: 0 to run without): %w", m.wsDir, err)
		}
	}
	if err := m.Recover(ctx); err != nil {
		return nil, err
	}
	m.recoverSandboxes(ctx)
	if _, err := m.reconcile(ctx, true); err != nil {
		m.log.ErrorContext(ctx, "reconciling at start", "err", err)
	}
	if err := m.startPool(ctx); err != nil {
		m.StopPool(ctx)
		return nil, err
	}
	return m, nil
}

// Driver is the default workspace driver in use.
func (m *Manager) Driver() string { return m.driver }

func (m *Manager) step(name string) error {
	if m.failAt != nil {
		return m.failAt(name)
	}
	return nil
}

func (m *Manager) event(ctx context.Context, e store.Event, detail map[string]any) {
	e = eventRecord(ctx, e, detail)
	if _, err := m.st.AppendEvent(ctx, e); err != nil {
		m.log.WarnContext(ctx, "recording event", "type", e.Type, "err", err)
	}
}

// eventRecord completes an event: its actor (default "api"), its details
// as JSON, with the request that caused it.
func eventRecord(ctx context.Context, e store.Event, detail map[string]any) store.Event {
	if e.Actor == "" {
		e.Actor = "api"
	}
	// An event caused by an API request names it, as the request's log
	// line does.
	if rid := logx.Get(ctx, logx.KeyRequest); rid != "" {
		if detail == nil {
			detail = map[string]any{}
		}
		detail[logx.KeyRequest] = rid
	}
	if detail != nil {
		b, _ := json.Marshal(detail)
		e.Detail = string(b)
	}
	return e
}

// cleanup runs registered undo steps in reverse unless released.
type cleanup struct{ fns []func() }

func (c *cleanup) add(f func()) { c.fns = append(c.fns, f) }
func (c *cleanup) release()     { c.fns = nil }
func (c *cleanup) run() {
	for i := len(c.fns) - 1; i >= 0; i-- {
		c.fns[i]()
	}
}

// --- repos

// AddRepo caches the repo at rawURL (cloning once).
func (m *Manager) AddRepo(ctx context.Context, rawURL string, progress io.Writer) (store.Repo, bool, error) {
	return m.cache.Add(ctx, rawURL, progress)
}

// GetRepo finds a repo by ID or URL.
func (m *Manager) GetRepo(ctx context.Context, idOrURL string) (store.Repo, error) {
	return m.cache.Lookup(ctx, idOrURL)
}

// ListRepos lists cached repos.
func (m *Manager) ListRepos(ctx context.Context) ([]store.Repo, error) { return m.st.ListRepos(ctx) }

// FetchRepo updates a mirror; rawURL may carry credentials for this fetch.
func (m *Manager) FetchRepo(ctx context.Context, idOrURL, rawURL string, progress io.Writer) (store.Repo, error) {
	r, err := m.GetRepo(ctx, idOrURL)
	if err != nil {
		return r, err
	}
	return m.cache.Fetch(ctx, r.ID, rawURL, progress)
}

// RemoveRepo deletes a repo from the cache. While workspaces use it the
// removal is refused unless force, which removes those workspaces first.
func (m *Manager) RemoveRepo(ctx context.Context, idOrURL string, force bool) error {
	r, err := m.GetRepo(ctx, idOrURL)
	if err != nil {
		return err
	}
	wss, err := m.st.ListWorkspaces(ctx, r.ID)
	if err != nil {
		return err
	}
	if len(wss) > 0 && !force {
		names := make([]string, 0, len(wss))
		for _, w := range wss {
			names = append(names, w.ID)
		}
		return fmt.Errorf("repo %s is used by workspace(s) %s (use --force to remove them too): %w", r.ID, strings.Join(names, ", "), errdefs.ErrConflict)
	}
	// Children before parents does not matter: forks are independent copies.
	for _, w := range wss {
		if err := m.RemoveWorkspace(ctx, w.ID); err != nil && !errors.Is(err, errdefs.ErrNotFound) {
			return fmt.Errorf("removing repo %s: %w", r.ID, err)
		}
	}
	return m.cache.Remove(ctx, r.ID)
}

// --- workspaces

// CreateRequest asks for a new workspace.
type CreateRequest = apitypes.CreateWorkspaceRequest

func validTask(task string) error {
	if len(task) > 200 {
		return errdefs.Invalid("task label is longer than 200 bytes")
	}
	for _, r := range task {
		if r < 0x20 || r == 0x7f {
			return errdefs.Invalid("task label contains control characters")
		}
	}
	return nil
}

// Bounds of an uploaded directory (UploadWorkspace); a workspace with a
// smaller disk quota takes at most its quota.
const (
	MaxUploadEntries = archive.DefaultMaxEntries
	MaxUploadBytes   = archive.DefaultMaxBytes
)

// CreateWorkspace makes a workspace of repo at ref on its own branch, or,
// with req.Empty, a scratch workspace: a repository with one empty commit,
// so that diff and commit work as in any other.
func (m *Manager) CreateWorkspace(ctx context.Context, req CreateRequest) (store.Workspace, error) {
	return m.createWorkspace(ctx, req, nil)
}

// UploadWorkspace makes a workspace whose base commit is the directory
// tree in tarball, a tar stream (see package archive for what it refuses:
// traversal, links then files through them, devices, more than
// MaxUploadEntries entries or MaxUploadBytes bytes, or the disk quota).
// req names no repo, ref or Empty. The upload becomes a repo of its own,
// removed with the last workspace that uses it.
func (m *Manager) UploadWorkspace(ctx context.Context, req CreateRequest, tarball io.Reader) (store.Workspace, error) {
	if req.Repo != "" || req.Ref != "" || req.Empty {
		return store.Workspace{}, errdefs.Invalid("an uploaded directory is the workspace's base: no repo, ref or empty with it")
	}
	if tarball == nil {
		return store.Workspace{}, errdefs.Invalid("no uploaded directory")
	}
	return m.createWorkspace(ctx, req, tarball)
}

func (m *Manager) createWorkspace(ctx context.Context, req CreateRequest, upload io.Reader) (store.Workspace, error) {
	driverName := req.Driver
	if driverName == "" {
		driverName = m.driver
	}
	drv, err := workspace.New(driverName)
	if err != nil {
		return store.Workspace{}, err
	}
	if driverName == workspace.Overlay && m.driver != workspace.Overlay {
		return store.Workspace{}, fmt.Errorf("workspace driver overlay is not available on this host: %w", errdefs.ErrUnavailable)
	}
	if err := validTask(req.Task); err != nil {
		return store.Workspace{}, err
	}
	quota, err := m.diskQuota(req.Disk, 0)
	if err != nil {
		return store.Workspace{}, err
	}
	drv = workspace.WithQuota(drv, quota, m.templates())
	if req.Branch != "" {
		if err := workspace.ValidBranch(ctx, req.Branch); err != nil {
			return store.Workspace{}, err
		}
	}
	if req.Ref != "" {
		if err := repocache.ValidRef(req.Ref); err != nil {
			return store.Workspace{}, err
		}
	}
	who := repocache.Identity{Name: m.cfg.Author.Name, Email: m.cfg.Author.Email}
	var repo store.Repo
	var release func()
	var commit, dropRepo string
	switch {
	case upload != nil:
		lim := archive.Limits{MaxEntries: MaxUploadEntries, MaxBytes: MaxUploadBytes}
		if quota > 0 {
			lim.MaxBytes = min(lim.MaxBytes, quota)
		}
		if repo, commit, err = m.cache.Import(ctx, upload, lim, who); err != nil {
			return store.Workspace{}, err
		}
		// The upload's repo exists for this workspace: it goes if the
		// workspace is not made (after the rollback below removed its
		// row, and after release).
		dropRepo = repo.ID
		defer func() {
			if dropRepo != "" {
				m.dropUploadRepo(context.WithoutCancel(ctx), dropRepo)
			}
		}()
		if release, err = m.useRepo(ctx, repo.ID); err != nil {
			return store.Workspace{}, err
		}
	case req.Empty:
		if req.Repo != "" || req.Ref != "" {
			return store.Workspace{}, errdefs.Invalid("an empty workspace has no repo or ref")
		}
		if repo, err = m.cache.Empty(ctx, who); err == nil {
			release, err = m.useRepo(ctx, repo.ID)
			if errors.Is(err, errdefs.ErrNotFound) {
				// Collected since it was looked up: make it again.
				if repo, err = m.cache.Empty(ctx, who); err == nil {
					release, err = m.useRepo(ctx, repo.ID)
				}
			}
		}
		if err != nil {
			return store.Workspace{}, err
		}
	case strings.TrimSpace(req.Repo) == "":
		return store.Workspace{}, errdefs.Invalid("repo is required (a repo ID or URL), unless the workspace is empty or uploaded")
	default:
		if ids.HasPrefix(req.Repo, "repo") {
			repo, err = m.st.GetRepo(ctx, req.Repo)
		} else {
			repo, _, err = m.cache.Add(ctx, req.Repo, nil)
		}
		if err != nil {
			return store.Workspace{}, err
		}
		// The collector leaves the repo and its checkouts alone until the
		// workspace's row uses them.
		release, err = m.useRepo(ctx, repo.ID)
		if errors.Is(err, errdefs.ErrNotFound) && !ids.HasPrefix(req.Repo, "repo") {
			// Collected since it was looked up: clone it again.
			if repo, _, err = m.cache.Add(ctx, req.Repo, nil); err == nil {
				release, err = m.useRepo(ctx, repo.ID)
			}
		}
		if err != nil {
			return store.Workspace{}, err
		}
	}
	defer release()
	if commit == "" {
		if commit, err = m.cache.Resolve(ctx, repo, req.Ref); err != nil {
			return store.Workspace{}, err
		}
	}
	var pristine store.Pristine
	if driverName == workspace.Overlay {
		if pristine, err = m.cache.Pristine(ctx, repo, commit); err != nil {
			return store.Workspace{}, err
		}
	}

	id := ids.New("ws")
	branch := req.Branch
	if branch == "" {
		branch = "agentbox/" + id
	}
	ref := req.Ref
	if ref == "" {
		ref = repo.DefaultBranch
	}
	now := time.Now().UTC()
	w := store.Workspace{ID: id, Node: m.cfg.NodeID, RepoID: repo.ID, PristineID: pristine.ID, Ref: ref, BaseCommit: commit,
		Branch: branch, Task: req.Task, Driver: driverName, Dir: filepath.Join(m.wsDir, id), DiskQuota: quota,
		State: store.WorkspaceCreating, CreatedAt: now, UpdatedAt: now}

	defer m.hold(id)()
	var undo cleanup
	defer undo.run()
	if err := m.step("row"); err != nil {
		return w, err
	}
	if err := m.st.CreateWorkspace(ctx, w); err != nil {
		return w, err
	}
	undo.add(func() { m.st.DeleteWorkspace(context.WithoutCancel(ctx), id) })
	if err := m.step("dir"); err != nil {
		return w, err
	}
	if err := os.Mkdir(w.Dir, 0o711); err != nil {
		return w, fmt.Errorf("creating workspace %s: %w", id, err)
	}
	undo.add(func() { workspace.Remove(context.WithoutCancel(ctx), drv, w.Dir) })
	if err := m.step("files"); err != nil {
		return w, err
	}
	if err := drv.Create(ctx, w.Dir, workspace.Source{Repo: repo, Commit: commit, Lower: pristine.Path, Branch: branch, UID: m.cfg.UID, GID: m.cfg.GID}); err != nil {
		return w, fmt.Errorf("creating workspace %s: %w", id, err)
	}
	if err := m.step("hostgit"); err != nil {
		return w, err
	}
	seed := filepath.Join(drv.Files(w.Dir), ".git", "index")
	if pristine.Path != "" {
		seed = filepath.Join(pristine.Path, ".git", "index")
	}
	if err := workspace.InitHostGit(ctx, w.Dir, repo.Path, seed); err != nil {
		return w, fmt.Errorf("creating workspace %s: %w", id, err)
	}
	if err := m.step("ready"); err != nil {
		return w, err
	}
	w.State = store.WorkspaceReady
	detail := map[string]any{"commit": commit, "branch": branch, "driver": driverName, "task": req.Task}
	switch {
	case upload != nil:
		detail["source"] = "upload"
	case req.Empty:
		detail["source"] = "empty"
	}
	ev := eventRecord(ctx, store.Event{Type: "workspace.created", RepoID: repo.ID, WorkspaceID: id}, detail)
	if _, err := m.st.UpdateWorkspaceEvent(ctx, w, ev); err != nil {
		return w, err
	}
	undo.release()
	dropRepo = ""
	if pristine.ID != "" {
		m.st.TouchPristine(ctx, pristine.ID, now)
	}
	repo.LastUsedAt = now
	m.st.UpdateRepo(ctx, repo)
	m.log.InfoContext(ctx, "workspace created", KeyWorkspace, id, KeyRepo, repo.ID, "driver", driverName)
	return w, nil
}

// GetWorkspace returns a workspace by ID.
func (m *Manager) GetWorkspace(ctx context.Context, id string) (store.Workspace, error) {
	if strings.TrimSpace(id) == "" {
		return store.Workspace{}, errdefs.Invalid("workspace ID is empty")
	}
	return m.st.GetWorkspace(ctx, id)
}

// ListFilter selects workspaces.
type ListFilter struct {
	Repo string
	Task string
}

// ListWorkspaces lists workspaces, optionally of one repo or task.
func (m *Manager) ListWorkspaces(ctx context.Context, f ListFilter) ([]store.Workspace, error) {
	repoID := ""
	if f.Repo != "" {
		r, err := m.GetRepo(ctx, f.Repo)
		if err != nil {
			return nil, err
		}
		repoID = r.ID
	}
	all, err := m.st.ListWorkspaces(ctx, repoID)
	if err != nil {
		return nil, err
	}
	out := all[:0]
	for _, w := range all {
		if f.Task == "" || w.Task == f.Task {
			out = append(out, w)
		}
	}
	return out, nil
}

// FilesPath is the host path of a workspace's files.
func (m *Manager) FilesPath(w store.Workspace) string {
	drv, _ := driverOf(w)
	return drv.Files(w.Dir)
}

// driverOf is the driver of existing workspace w, with its quota.
func driverOf(w store.Workspace) (workspace.Driver, error) {
	drv, err := workspace.New(w.Driver)
	if err != nil {
		return nil, fmt.Errorf("workspace %s: %w", w.ID, err)
	}
	return workspace.WithQuota(drv, w.DiskQuota, ""), nil
}

// templates holds the formatted images new quota volumes are copied from.
func (m *Manager) templates() string { return filepath.Join(m.cfg.DataDir, "templates") }

// diskQuota is the quota of a new workspace: asked (0: none asked), else
// inherited, else the daemon's default; within the policy ceiling.
func (m *Manager) diskQuota(asked policy.ByteSize, inherited int64) (int64, error) {
	q := int64(asked)
	switch {
	case q < 0:
		return 0, errdefs.Invalid("disk %d: a quota cannot be negative", q)
	case q == 0 && inherited > 0:
		return inherited, nil
	case q == 0:
		q = m.cfg.DiskQuota
	}
	if q == 0 {
		return 0, nil
	}
	c := policy.DefaultCeilings()
	if m.cfg.Ceilings != nil {
		c = *m.cfg.Ceilings
	}
	if q < workspace.MinQuota {
		return 0, errdefs.Invalid("disk %s is under the minimum quota of %s", policy.ByteSize(q), policy.ByteSize(workspace.MinQuota))
	}
	if c.Disk > 0 && q > int64(c.Disk) {
		return 0, errdefs.Invalid("disk %s is over the daemon's ceiling of %s", policy.ByteSize(q), c.Disk)
	}
	return q, nil
}

// RemoveWorkspace unmounts and deletes a workspace. The row is marked
// removing first so that a crash midway is finished at the next start.
func (m *Manager) RemoveWorkspace(ctx context.Context, id string) error {
	w, err := m.GetWorkspace(ctx, id)
	if err != nil {
		return err
	}
	if !m.mine(w.Node) {
		return m.notMine(ctx, "workspace", id, w.Node)
	}
	defer m.hold(id)()
	l := m.lock(id)
	l.Lock()
	defer l.Unlock()
	if err := m.finishRemove(ctx, w); err != nil {
		return err
	}
	m.locksMu.Lock()
	delete(m.locks, id)
	m.locksMu.Unlock()
	m.forgetProcesses(id)
	m.event(ctx, store.Event{Type: "workspace.removed", RepoID: w.RepoID, WorkspaceID: id}, nil)
	m.log.InfoContext(ctx, "workspace removed", KeyWorkspace, id)
	m.dropUploadRepo(ctx, w.RepoID)
	return nil
}

// dropUploadRepo removes the repo of an uploaded directory once no
// workspace uses it: nothing else can make a workspace of it again. Other
// repos stay for the collector.
func (m *Manager) dropUploadRepo(ctx context.Context, repoID string) {
	r, err := m.st.GetRepo(ctx, repoID)
	if err != nil || !repocache.IsUpload(r.URL) || !m.ownPath(r.Path) {
		return
	}
	if err := m.gcRepo(ctx, repoID); err != nil && !errors.Is(err, errGCSkip) {
		m.log.WarnContext(ctx, "removing the repo of an upload", KeyRepo, repoID, "err", err)
	}
}

func (m *Manager) finishRemove(ctx context.Context, w store.Workspace) error {
	// Sandboxes first: none may keep running on files that are going away.
	if err := m.removeWorkspaceSandboxes(ctx, w.ID); err != nil {
		return fmt.Errorf("removing workspace %s: %w", w.ID, err)
	}
	if w.State != store.WorkspaceRemoving {
		w.State = store.WorkspaceRemoving
		w.UpdatedAt = time.Now().UTC()
		if err := m.st.UpdateWorkspace(ctx, w); err != nil {
			return err
		}
	}
	drv, err := driverOf(w)
	if err != nil {
		return err
	}
	// The row says removing from here on, so attach mounts nothing again.
	m.attachMu.Lock()
	err = drv.Detach(ctx, w.Dir)
	m.attachMu.Unlock()
	if err != nil {
		return fmt.Errorf("removing workspace %s: %w", w.ID, err)
	}
	if err := workspace.Remove(ctx, drv, w.Dir); err != nil {
		return fmt.Errorf("removing workspace %s: %w", w.ID, err)
	}
	return m.st.DeleteWorkspace(ctx, w.ID)
}

// ForkRequest asks for a copy of a workspace.
type ForkRequest = apitypes.ForkRequest

// ForkWorkspaces makes req.Count forks of workspace id at once, all or
// none: if one fails, those made are removed and the first error returned.
// With a branch, fork i (from 1) is on BRANCH-i.
func (m *Manager) ForkWorkspaces(ctx context.Context, id string, req apitypes.ForksRequest) ([]store.Workspace, error) {
	n := req.Count
	if n < 1 || n > apitypes.MaxForks {
		return nil, errdefs.Invalid("fork count %d is not between 1 and %d", n, apitypes.MaxForks)
	}
	if _, err := m.GetWorkspace(ctx, id); err != nil {
		return nil, err
	}
	forks := make([]store.Workspace, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		one := req.ForkRequest
		if one.Branch != "" && n > 1 {
			one.Branch = fmt.Sprintf("%s-%d", req.Branch, i+1)
		}
		wg.Go(func() { forks[i], errs[i] = m.ForkWorkspace(ctx, id, one) })
	}
	wg.Wait()
	i := slices.IndexFunc(errs, func(err error) bool { return err != nil })
	if i < 0 {
		return forks, nil
	}
	for j, w := range forks {
		if errs[j] == nil {
			if err := m.RemoveWorkspace(context.WithoutCancel(ctx), w.ID); err != nil {
				m.log.WarnContext(ctx, "removing a fork after another failed", "workspace_id", w.ID, "err", err)
			}
		}
	}
	return nil, errs[i]
}

// ForkWorkspace makes an independent copy of workspace id, copying only
// its own changes (overlay), on a new branch at the parent's head.
func (m *Manager) ForkWorkspace(ctx context.Context, id string, req ForkRequest) (store.Workspace, error) {
	parent, err := m.GetWorkspace(ctx, id)
	if err != nil {
		return parent, err
	}
	if parent.State != store.WorkspaceReady {
		return parent, fmt.Errorf("workspace %s is %s: %w", id, parent.State, errdefs.ErrConflict)
	}
	if err := validTask(req.Task); err != nil {
		return store.Workspace{}, err
	}
	if req.Branch != "" {
		if err := workspace.ValidBranch(ctx, req.Branch); err != nil {
			return store.Workspace{}, err
		}
	}
	drv, err := driverOf(parent)
	if err != nil {
		return parent, err
	}
	quota, err := m.diskQuota(req.Disk, parent.DiskQuota)
	if err != nil {
		return parent, err
	}
	childDrv := workspace.WithQuota(workspace.Unwrap(drv), quota, m.templates())
	var lower string
	if parent.PristineID != "" {
		p, err := m.st.GetPristine(ctx, parent.PristineID)
		if err != nil {
			return parent, err
		}
		lower = p.Path
	}
	// Writers are held off while the parent is copied.
	l := m.lock(id)
	l.Lock()
	defer l.Unlock()

	cid := ids.New("ws")
	branch := req.Branch
	if branch == "" {
		branch = "agentbox/" + cid
	}
	task := req.Task
	if task == "" {
		task = parent.Task
	}
	now := time.Now().UTC()
	w := parent
	w.ID, w.ParentID, w.Branch, w.Task, w.Dir = cid, parent.ID, branch, task, filepath.Join(m.wsDir, cid)
	w.State, w.CreatedAt, w.UpdatedAt, w.DiskQuota = store.WorkspaceCreating, now, now, quota

	defer m.hold(cid)()
	var undo cleanup
	defer undo.run()
	if err := m.st.CreateWorkspace(ctx, w); err != nil {
		return w, err
	}
	undo.add(func() { m.st.DeleteWorkspace(context.WithoutCancel(ctx), cid) })
	if err := os.Mkdir(w.Dir, 0o711); err != nil {
		return w, err
	}
	undo.add(func() { workspace.Remove(context.WithoutCancel(ctx), childDrv, w.Dir) })
	if err := m.step("fork-files"); err != nil {
		return w, err
	}
	// The fork's branch starts at the parent's head (which may be a commit
	// made in the parent, not its base).
	_, head, err := workspace.Head(drv.Files(parent.Dir))
	if err != nil {
		return w, fmt.Errorf("forking workspace %s: %w", id, err)
	}
	src := workspace.Source{Lower: lower, Branch: branch, Commit: head, UID: m.cfg.UID, GID: m.cfg.GID}
	if err := childDrv.Fork(ctx, parent.Dir, w.Dir, src); err != nil {
		return w, fmt.Errorf("forking workspace %s: %w", id, err)
	}
	repo, err := m.st.GetRepo(ctx, parent.RepoID)
	if err != nil {
		return w, err
	}
	if err := workspace.ForkHostGit(ctx, parent.Dir, w.Dir, repo.Path); err != nil {
		return w, fmt.Errorf("forking workspace %s: %w", id, err)
	}
	if err := m.step("fork-ready"); err != nil {
		return w, err
	}
	w.State = store.WorkspaceReady
	ev := eventRecord(ctx, store.Event{Type: "workspace.forked", RepoID: w.RepoID, WorkspaceID: cid},
		map[string]any{"parent_id": id, "branch": branch})
	if _, err := m.st.UpdateWorkspaceEvent(ctx, w, ev); err != nil {
		return w, err
	}
	undo.release()
	return w, nil
}

// ready fetches a workspace that must be usable, and makes sure its files
// are attached (mounted).
func (m *Manager) ready(ctx context.Context, id string) (store.Workspace, workspace.Driver, error) {
	m.touch(id) // before the state is read: see gcWorkspace
	w, err := m.GetWorkspace(ctx, id)
	if err != nil {
		if errors.Is(err, errdefs.ErrNotFound) {
			m.touched.Delete(id)
		}
		return w, nil, err
	}
	if !m.mine(w.Node) {
		return w, nil, m.notMine(ctx, "workspace", id, w.Node)
	}
	if w.State != store.WorkspaceReady {
		return w, nil, fmt.Errorf("workspace %s is %s: %w", id, w.State, errdefs.ErrConflict)
	}
	drv, err := driverOf(w)
	if err != nil {
		return w, nil, err
	}
	if _, err := m.attach(ctx, w, drv, "api"); err != nil {
		return w, nil, err
	}
	return w, drv, nil
}

// attach mounts the files of ready workspace w again if they are not
// attached (a reboot, a manual umount) and records it. Without it, reads
// would see an empty directory and writes would land under the mount
// point, hidden by the next mount.
func (m *Manager) attach(ctx context.Context, w store.Workspace, drv workspace.Driver, actor string) (bool, error) {
	return m.attachAs(ctx, w, drv, actor, "workspace.remounted")
}

// attachAs is attach recording a re-mount as an event of type typ.
func (m *Manager) attachAs(ctx context.Context, w store.Workspace, drv workspace.Driver, actor, typ string) (bool, error) {
	if ok, err := drv.Attached(w.Dir); err == nil && ok {
		return false, nil // the common case, without the lock
	}
	m.attachMu.Lock()
	defer m.attachMu.Unlock()
	if ok, err := drv.Attached(w.Dir); err != nil {
		return false, fmt.Errorf("workspace %s: %w", w.ID, err)
	} else if ok {
		return false, nil
	}
	// A removal may have started since w was read.
	if cur, err := m.st.GetWorkspace(ctx, w.ID); err != nil {
		return false, err
	} else if cur.State != store.WorkspaceReady {
		return false, fmt.Errorf("workspace %s is %s: %w", w.ID, cur.State, errdefs.ErrConflict)
	}
	lower := ""
	if w.PristineID != "" {
		p, err := m.st.GetPristine(ctx, w.PristineID)
		if err != nil {
			return false, fmt.Errorf("workspace %s: %w", w.ID, err)
		}
		lower = p.Path
	}
	if err := drv.Attach(ctx, w.Dir, lower); err != nil {
		return false, fmt.Errorf("re-mounting workspace %s: %w", w.ID, err)
	}
	// The copy driver has nothing to mount: its files are either there or
	// gone, and Attach does not bring them back.
	if ok, err := drv.Attached(w.Dir); err != nil || !ok {
		return false, nil
	}
	m.event(ctx, store.Event{Actor: actor, Type: typ, RepoID: w.RepoID, WorkspaceID: w.ID}, nil)
	m.log.InfoContext(ctx, "workspace re-mounted", KeyWorkspace, w.ID)
	return true, nil
}

// named adds the workspace to an error from host-side git unless the
// error already names it.
func named(id string, err error) error {
	if strings.Contains(err.Error(), id) {
		return err
	}
	return fmt.Errorf("workspace %s: %w", id, err)
}

func (m *Manager) git(w store.Workspace, drv workspace.Driver) workspace.Git {
	return workspace.Git{Dir: w.Dir, Files: drv.Files(w.Dir), Timeout: m.cfg.GitTimeout, MaxDiffBytes: m.cfg.MaxDiffBytes}
}

// Status describes a workspace's files relative to its base.
type Status = apitypes.Status

// Status lists what changed since the base commit.
func (m *Manager) Status(ctx context.Context, id string) (Status, error) {
	w, drv, err := m.ready(ctx, id)
	if err != nil {
		return Status{}, err
	}
	l := m.lock(id)
	l.Lock()
	defer l.Unlock()
	changes, err := m.git(w, drv).Changes(ctx, w.BaseCommit)
	if err != nil {
		return Status{}, named(id, err)
	}
	branch, head, err := workspace.Head(drv.Files(w.Dir))
	if err != nil {
		return Status{}, named(id, err)
	}
	s := Status{ID: id, Branch: branch, Head: head, BaseCommit: w.BaseCommit, Dirty: len(changes) > 0, Changes: changes}
	if w.DiskQuota > 0 {
		if u, err := workspace.VolumeUsage(w.Dir); err == nil {
			s.Disk = &u
		}
	}
	m.setDirty(ctx, w, s.Dirty)
	return s, nil
}

func (m *Manager) setDirty(ctx context.Context, w store.Workspace, dirty bool) {
	if w.Dirty == dirty {
		return
	}
	w.Dirty = dirty
	w.UpdatedAt = time.Now().UTC()
	if err := m.st.UpdateWorkspace(ctx, w); err != nil {
		m.log.WarnContext(ctx, "updating workspace", KeyWorkspace, w.ID, "err", err)
	}
}

// Diff is the unified diff from the base commit to the files.
func (m *Manager) Diff(ctx context.Context, id string, paths []string) ([]byte, error) {
	w, drv, err := m.ready(ctx, id)
	if err != nil {
		return nil, err
	}
	clean := make([]string, 0, len(paths))
	for _, p := range paths {
		c, err := fileapi.CleanPath(p)
		if err != nil {
			return nil, err
		}
		clean = append(clean, c)
	}
	paths = clean
	l := m.lock(id)
	l.Lock()
	defer l.Unlock()
	d, err := m.git(w, drv).Diff(ctx, w.BaseCommit, paths...)
	if err != nil {
		return nil, named(id, err)
	}
	if len(paths) == 0 {
		m.setDirty(ctx, w, len(d) > 0)
	}
	return d, nil
}

// Patch is workspace id's result as one mbox of format-patch messages
// from its base commit (see workspace.Git.Patch), with what it holds.
func (m *Manager) Patch(ctx context.Context, id string) ([]byte, workspace.Export, error) {
	return m.export(ctx, id, workspace.Git.Patch)
}

// Bundle is a git bundle of workspace id's branch from its base commit
// (see workspace.Git.Bundle), with what it holds.
func (m *Manager) Bundle(ctx context.Context, id string) ([]byte, workspace.Export, error) {
	return m.export(ctx, id, workspace.Git.Bundle)
}

func (m *Manager) export(ctx context.Context, id string, how func(workspace.Git, context.Context, string, workspace.Author) ([]byte, workspace.Export, error)) ([]byte, workspace.Export, error) {
	w, drv, err := m.ready(ctx, id)
	if err != nil {
		return nil, workspace.Export{}, err
	}
	l := m.lock(id)
	l.Lock()
	defer l.Unlock()
	b, e, err := how(m.git(w, drv), ctx, w.BaseCommit, m.cfg.Author)
	if err != nil {
		return nil, e, named(id, err)
	}
	return b, e, nil
}

// CommitResult is what a commit made.
type CommitResult = apitypes.CommitResult

// Commit records every change as a commit on the workspace's branch,
// unless its diff fails the check (see CommitWith).
func (m *Manager) Commit(ctx context.Context, id, msg string, author *workspace.Author) (CommitResult, error) {
	return m.CommitWith(ctx, id, apitypes.CommitRequest{Message: msg, Author: author})
}

// CommitWith records every change as a commit on the workspace's branch.
// The tree to be committed is checked first, as CheckDiff checks the
// workspace (against the policy of its latest sandbox and the stored
// secrets): a commit that fails the check is refused, naming each finding
// (secrets redacted), unless req.Force, and then the event records that it
// was forced and what was found. The tree judged is the tree committed.
func (m *Manager) CommitWith(ctx context.Context, id string, req apitypes.CommitRequest) (CommitResult, error) {
	w, drv, err := m.ready(ctx, id)
	if err != nil {
		return CommitResult{}, err
	}
	a := m.cfg.Author
	if req.Author != nil && (req.Author.Name != "" || req.Author.Email != "") {
		a = *req.Author
	}
	pol, err := m.lastSandboxPolicy(ctx, id)
	if err != nil {
		return CommitResult{}, err
	}
	known, err := m.knownSecrets(ctx, id)
	if err != nil {
		return CommitResult{}, err
	}
	opt := diffcheck.Options{KnownSecrets: known}
	if pol != nil {
		opt.Writable = pol.PathWritable
	}
	l := m.lock(id)
	l.Lock()
	defer l.Unlock()
	g := m.git(w, drv)
	var findings *diffcheck.Report
	vet := func(ctx context.Context, tree string) error {
		changes, err := g.TreeChanges(ctx, w.BaseCommit, tree)
		if err != nil {
			return fmt.Errorf("workspace %s: checking the commit: %w", id, err)
		}
		d, err := g.TreeDiff(ctx, w.BaseCommit, tree)
		if err != nil {
			// Unscanned is not clean: too large a diff needs force.
			if !req.Force {
				return fmt.Errorf("workspace %s: the commit is refused: its diff cannot be checked (%v); --force commits it anyway, recorded: %w", id, err, errdefs.ErrConflict)
			}
			findings = &diffcheck.Report{ID: id, Truncated: true}
			return nil
		}
		rep := diffcheck.Check(changes, d, opt)
		if rep.OK {
			return nil
		}
		rep.ID = id
		if !req.Force {
			return fmt.Errorf("workspace %s: the commit is refused: its diff fails the check: %s; --force commits it anyway, recorded: %w", id, diffcheck.Summary(rep, 20), errdefs.ErrConflict)
		}
		findings = &rep
		return nil
	}
	sha, err := g.Commit(ctx, req.Message, a, m.cfg.UID, m.cfg.GID, vet)
	if err != nil {
		return CommitResult{}, named(id, err)
	}
	branch, _, _ := workspace.Head(drv.Files(w.Dir))
	res := CommitResult{ID: id, Commit: sha, Branch: branch}
	detail := map[string]any{"commit": sha, "branch": branch}
	if findings != nil {
		res.Forced, res.Findings = true, findings
		detail["forced"] = true
		detail["outside_writable"] = len(findings.OutsideWritable)
		detail["secrets"] = len(findings.Secrets)
		detail["findings"] = diffcheck.Summary(*findings, 20)
	}
	m.event(ctx, store.Event{Type: "workspace.committed", RepoID: w.RepoID, WorkspaceID: id}, detail)
	return res, nil
}

// Files opens the file API of a workspace for one operation. write says
// whether the operation changes files: writers share the workspace with
// each other and are held off while a fork copies it. Call release when done.
func (m *Manager) Files(ctx context.Context, id string, write bool) (fs *fileapi.FS, release func(), err error) {
	w, drv, err := m.ready(ctx, id)
	if err != nil {
		return nil, nil, err
	}
	l := m.lock(id)
	l.RLock()
	f, err := fileapi.Open(drv.Files(w.Dir), fileapi.Options{UID: m.cfg.UID, GID: m.cfg.GID})
	if err != nil {
		l.RUnlock()
		// A removal that won the lock since ready() is reported as such,
		// not as a missing path.
		if cur, gerr := m.st.GetWorkspace(ctx, id); gerr != nil {
			return nil, nil, gerr
		} else if cur.State != store.WorkspaceReady {
			return nil, nil, fmt.Errorf("workspace %s is %s: %w", id, cur.State, errdefs.ErrConflict)
		}
		return nil, nil, fmt.Errorf("workspace %s: %w", id, err)
	}
	return f, func() {
		f.Close()
		l.RUnlock()
	}, nil
}

// FileChanged records a change made through the file API: one event per
// request. detail, if given, adds to the event's details.
func (m *Manager) FileChanged(ctx context.Context, id, op, path string, detail ...map[string]any) {
	w, err := m.st.GetWorkspace(ctx, id)
	if err != nil {
		return
	}
	m.setDirty(ctx, w, true)
	d := map[string]any{"path": path}
	for _, more := range detail {
		maps.Copy(d, more)
	}
	m.event(ctx, store.Event{Type: "file." + op, RepoID: w.RepoID, WorkspaceID: id}, d)
}

// Events lists the event log.
func (m *Manager) Events(ctx context.Context, f store.EventFilter) ([]store.Event, error) {
	return m.st.ListEvents(ctx, f)
}
