package manager

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/internal/errdefs"
	"github.com/agentbox/agentbox/internal/ids"
	"github.com/agentbox/agentbox/internal/mountinfo"
	"github.com/agentbox/agentbox/internal/sandbox"
	"github.com/agentbox/agentbox/internal/store"
)

// Repair kinds: what one reconciler repair did. Each is recorded as an
// event of type "reconcile." + kind (actor "daemon") and counted by a
// RepairObserver.
const (
	// RepairSandboxLost: a sandbox recorded as running whose environment
	// or guest is gone was torn down and marked lost.
	RepairSandboxLost = "sandbox_lost"
	// RepairSandboxRolledBack: the row (and whatever was made) of a
	// sandbox create that no longer runs was removed.
	RepairSandboxRolledBack = "sandbox_rolled_back"
	// RepairEnvironmentRemoved: a container or jail carrying this daemon's
	// labels that no running sandbox owns was removed.
	RepairEnvironmentRemoved = "environment_removed"
	// RepairWorkspaceRemounted: a ready workspace whose files were not
	// mounted was mounted again.
	RepairWorkspaceRemounted = "workspace_remounted"
	// RepairWorkspaceRolledBack: a workspace left creating or removing by
	// an operation that no longer runs was removed.
	RepairWorkspaceRolledBack = "workspace_rolled_back"
	// RepairWorkspaceThawed: a ready workspace whose disk a fork had frozen
	// (and a crash kept from thawing) was thawed at start.
	RepairWorkspaceThawed = "workspace_thawed"
	// RepairMountRemoved: a mount under the workspaces directory that no
	// workspace owns was detached.
	RepairMountRemoved = "mount_removed"
	// RepairDirRemoved: a directory under the data dir that no row owns
	// (a workspace, a sandbox's run directory, a repo mirror, a pristine
	// checkout) was removed.
	RepairDirRemoved = "dir_removed"
	// RepairPristineForgotten: an unused pristine row whose checkout is
	// gone was deleted.
	RepairPristineForgotten = "pristine_forgotten"
)

// RepairKinds lists every repair kind, so that a metric can show each at
// zero from the start.
var RepairKinds = []string{RepairSandboxLost, RepairSandboxRolledBack, RepairEnvironmentRemoved,
	RepairWorkspaceRemounted, RepairWorkspaceRolledBack, RepairWorkspaceThawed, RepairMountRemoved, RepairDirRemoved, RepairPristineForgotten}

// RepairObserver is implemented by a Config.Observer that also counts the
// reconciler's repairs (the daemon's metrics). It is optional: an
// Observer without it is not told.
type RepairObserver interface {
	ObserveRepair(kind string)
}

// Repair is one repair a reconcile pass made.
type Repair struct {
	// Kind is one of the Repair* constants.
	Kind string `json:"kind"`
	// Object is what was repaired: an ID, a container ref or a path.
	Object string `json:"object"`
	// Reason says what was wrong.
	Reason string `json:"reason"`
}

// reconcileState is the reconciler's part of a Manager.
type reconcileState struct {
	// pass serialises reconcile passes.
	pass sync.Mutex
	// busy counts, per object ID, the operations of this process that are
	// making or removing it: the reconciler never touches those.
	busyMu sync.Mutex
	busy   map[string]int
	// suspects are the repo and pristine directories without a row seen
	// by the previous periodic pass: a clone renames its directory into
	// place a moment before it records the row, so such a directory is
	// removed only when two passes in a row find it orphaned.
	suspects map[string]bool
}

// hold marks id as being made or removed by this process until the
// returned func is called.
func (m *Manager) hold(id string) func() {
	r := &m.rec
	r.busyMu.Lock()
	if r.busy == nil {
		r.busy = map[string]int{}
	}
	r.busy[id]++
	r.busyMu.Unlock()
	return func() {
		r.busyMu.Lock()
		if r.busy[id]--; r.busy[id] <= 0 {
			delete(r.busy, id)
		}
		r.busyMu.Unlock()
	}
}

func (m *Manager) isBusy(id string) bool {
	m.rec.busyMu.Lock()
	defer m.rec.busyMu.Unlock()
	return m.rec.busy[id] > 0
}

// OwnerID is the value of sandbox.LabelOwner on the environments made by
// a daemon whose data dir is dataDir: the reconciler of one daemon lists
// and removes only its own, on an engine other daemons share.
func OwnerID(dataDir string) string {
	if abs, err := filepath.Abs(dataDir); err == nil {
		dataDir = abs
	}
	sum := sha256.Sum256([]byte(filepath.Clean(dataDir)))
	return "d" + hex.EncodeToString(sum[:])[:16]
}

// countRepair tells a RepairObserver of one repair. The start-time
// repairs of Recover and recoverSandboxes, which keep their own event
// types, are counted here too.
func (m *Manager) countRepair(kind string) {
	if o, ok := m.cfg.Observer.(RepairObserver); ok {
		o.ObserveRepair(kind)
	}
}

func (m *Manager) owner() string { return OwnerID(m.cfg.DataDir) }

// Reconcile compares the database with what exists (environments carrying
// this daemon's labels, guest connections, workspace mounts, directories
// under the data dir) and repairs both ways, one event per repair. It
// never touches an object that an operation of this process is making or
// removing. It returns the repairs made.
func (m *Manager) Reconcile(ctx context.Context) ([]Repair, error) {
	return m.reconcile(ctx, false)
}

// RunReconcile runs Reconcile every interval until ctx ends.
func (m *Manager) RunReconcile(ctx context.Context, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if _, err := m.Reconcile(ctx); err != nil && ctx.Err() == nil {
				m.log.WarnContext(ctx, "reconcile pass", "err", err)
			}
		}
	}
}

// pass is one reconcile pass: the repairs made and the errors met.
type pass struct {
	m       *Manager
	atStart bool
	repairs []Repair
	errs    []error
}

func (p *pass) fail(err error) { p.errs = append(p.errs, err) }

// repaired records one repair: its event, its log line and its count.
func (p *pass) repaired(ctx context.Context, kind, object, reason string, ev store.Event) {
	m := p.m
	ev.Actor, ev.Type = "daemon", "reconcile."+kind
	m.event(ctx, ev, map[string]any{"object": object, "reason": reason})
	m.log.InfoContext(ctx, "reconciler repair", "kind", kind, "object", object, "reason", reason)
	m.countRepair(kind)
	p.repairs = append(p.repairs, Repair{Kind: kind, Object: object, Reason: reason})
}

// seen is what exists, read before the rows so that everything in it
// either has its row already or has none for good: every create records
// its row before it makes anything.
type seen struct {
	envs     map[string][]sandbox.Info // by backend name
	mounts   []string                  // under workspaces/
	wsDirs   []string
	sbDirs   []string
	repoDirs []string
	pcDirs   []string
}

func (m *Manager) reconcile(ctx context.Context, atStart bool) ([]Repair, error) {
	m.rec.pass.Lock()
	defer m.rec.pass.Unlock()
	p := &pass{m: m, atStart: atStart}
	snap := p.look(ctx)
	p.sandboxes(ctx)
	p.environments(ctx, snap)
	p.workspaces(ctx)
	p.mounts(ctx, snap)
	p.dirs(ctx, snap)
	p.pristines(ctx)
	return p.repairs, errors.Join(p.errs...)
}

// look lists what exists.
func (p *pass) look(ctx context.Context) seen {
	m := p.m
	s := seen{envs: map[string][]sandbox.Info{}}
	for name, be := range m.cfg.Backends {
		envs, err := be.List(ctx, map[string]string{sandbox.LabelManaged: "1", sandbox.LabelOwner: m.owner()})
		if err != nil {
			p.fail(fmt.Errorf("reconcile: listing %s environments: %w", name, err))
			continue
		}
		s.envs[name] = envs
	}
	pts, err := mountinfo.Under(m.wsDir)
	if err != nil {
		p.fail(fmt.Errorf("reconcile: reading the mount table: %w", err))
	}
	s.mounts = pts
	list := func(dir string) []string {
		es, err := os.ReadDir(dir)
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			p.fail(fmt.Errorf("reconcile: %w", err))
		}
		var out []string
		for _, e := range es {
			if e.IsDir() && !strings.HasPrefix(e.Name(), ".") {
				out = append(out, filepath.Join(dir, e.Name()))
			}
		}
		return out
	}
	s.wsDirs = list(m.wsDir)
	s.sbDirs = list(filepath.Join(m.cfg.DataDir, "sandboxes"))
	s.repoDirs = list(filepath.Join(m.cfg.DataDir, "repos"))
	s.pcDirs = list(filepath.Join(m.cfg.DataDir, "pristine"))
	return s
}

// sandboxes checks every sandbox row that says running or creating.
func (p *pass) sandboxes(ctx context.Context) {
	m := p.m
	sbs, err := m.st.ListSandboxes(ctx, store.SandboxFilter{})
	if err != nil {
		p.fail(fmt.Errorf("reconcile: listing sandboxes: %w", err))
		return
	}
	for _, sb := range sbs {
		st := sandbox.State(sb.State)
		if (st != sandbox.StateRunning && st != sandbox.StateCreating) || m.isBusy(sb.ID) || !m.mine(sb.Node) {
			continue
		}
		l := m.lock("sb:" + sb.WorkspaceID)
		if !l.TryLock() {
			continue // an exec, a create or a removal holds it: next pass
		}
		p.sandbox(ctx, sb.ID)
		l.Unlock()
	}
}

// sandbox checks one sandbox under its workspace's lock.
func (p *pass) sandbox(ctx context.Context, id string) {
	m := p.m
	sb, err := m.st.GetSandbox(ctx, id)
	if err != nil || m.isBusy(id) {
		return
	}
	ev := store.Event{WorkspaceID: sb.WorkspaceID, SandboxID: sb.ID}
	switch sandbox.State(sb.State) {
	case sandbox.StateCreating:
		// Not busy, so no create of this process makes it.
		p.removeEnvironments(ctx, sb)
		if err := m.teardown(ctx, &sb, sandbox.StateLost); err != nil {
			p.fail(fmt.Errorf("reconcile: rolling back sandbox %s: %w", sb.ID, err))
			return
		}
		if err := m.st.DeleteSandbox(ctx, sb.ID); err != nil {
			p.fail(fmt.Errorf("reconcile: rolling back sandbox %s: %w", sb.ID, err))
			return
		}
		p.repaired(ctx, RepairSandboxRolledBack, sb.ID, "create interrupted", ev)
	case sandbox.StateRunning:
		why := p.gone(ctx, sb)
		if why == "" {
			return
		}
		if err := m.teardown(ctx, &sb, sandbox.StateLost); err != nil {
			p.fail(fmt.Errorf("reconcile: tearing down lost sandbox %s: %w", sb.ID, err))
			return
		}
		p.repaired(ctx, RepairSandboxLost, sb.ID, why, ev)
	}
}

// gone says why running sandbox sb is not, or returns "".
func (p *pass) gone(ctx context.Context, sb store.Sandbox) string {
	m := p.m
	m.liveMu.Lock()
	lv, ok := m.live[sb.ID]
	m.liveMu.Unlock()
	switch {
	case !ok:
		return "no guest connection in this daemon"
	case !lv.alive():
		return "guest connection gone"
	}
	be, err := m.backend(sb.Backend)
	if err != nil || sb.BackendRef == "" {
		return ""
	}
	info, err := be.Inspect(ctx, sb.BackendRef)
	switch {
	case errors.Is(err, errdefs.ErrNotFound):
		return "environment gone"
	case err != nil:
		return "" // the engine may be busy: not proof of anything
	case info.State != sandbox.StateRunning:
		return "environment " + string(info.State)
	}
	return ""
}

// removeEnvironments removes whatever environment a backend made for sb
// (a create interrupted after the backend made it but before the row
// recorded its ref).
func (p *pass) removeEnvironments(ctx context.Context, sb store.Sandbox) {
	be, err := p.m.backend(sb.Backend)
	if err != nil {
		return
	}
	envs, err := be.List(ctx, map[string]string{sandbox.LabelSandbox: sb.ID})
	if err != nil {
		p.fail(fmt.Errorf("reconcile: listing environments of sandbox %s: %w", sb.ID, err))
		return
	}
	for _, in := range envs {
		if err := be.Remove(ctx, in.Ref); err != nil {
			p.fail(fmt.Errorf("reconcile: removing environment %s of sandbox %s: %w", in.Ref, sb.ID, err))
		}
	}
}

// environments removes the environments carrying this daemon's labels
// that no sandbox row owns, or whose row says stopped or lost. A running
// or creating row is the business of sandboxes.
func (p *pass) environments(ctx context.Context, snap seen) {
	m := p.m
	for _, name := range sortedKeys(snap.envs) {
		be := m.cfg.Backends[name]
		for _, in := range snap.envs[name] {
			id := in.Labels[sandbox.LabelSandbox]
			if id == "" || m.isBusy(id) {
				continue
			}
			wsID := in.Labels[sandbox.LabelWorkspace]
			l := m.lock("sb:" + wsID)
			if !l.TryLock() {
				continue
			}
			p.environment(ctx, be, in, id, wsID)
			l.Unlock()
		}
	}
}

func (p *pass) environment(ctx context.Context, be sandbox.Backend, in sandbox.Info, id, wsID string) {
	m := p.m
	reason := "no sandbox row"
	sb, err := m.st.GetSandbox(ctx, id)
	switch {
	case err == nil:
		if st := sandbox.State(sb.State); st == sandbox.StateRunning || st == sandbox.StateCreating {
			return
		}
		reason = "its sandbox is " + sb.State
	case !errors.Is(err, errdefs.ErrNotFound):
		p.fail(fmt.Errorf("reconcile: sandbox %s: %w", id, err))
		return
	case in.Labels[sandbox.LabelPool] == "1":
		// A warm pool's environment has no row until it is claimed: the
		// pool watches its own, and removes what a previous run left.
		return
	}
	if m.isBusy(id) {
		return
	}
	// Gone since it was listed (a teardown that finished meanwhile) is not
	// a repair.
	if _, err := be.Inspect(ctx, in.Ref); errors.Is(err, errdefs.ErrNotFound) {
		return
	}
	if err := be.Remove(ctx, in.Ref); err != nil {
		p.fail(fmt.Errorf("reconcile: removing %s environment %s of sandbox %s: %w", be.Name(), in.Ref, id, err))
		return
	}
	m.dropLive(id)
	os.RemoveAll(m.sandboxDir(id))
	p.repaired(ctx, RepairEnvironmentRemoved, be.Name()+":"+in.Ref, reason, store.Event{WorkspaceID: wsID, SandboxID: id})
}

// workspaces finishes the creates and removals that no longer run and
// mounts again the ready workspaces whose files are not mounted.
func (p *pass) workspaces(ctx context.Context) {
	m := p.m
	wss, err := m.st.ListWorkspaces(ctx, "")
	if err != nil {
		p.fail(fmt.Errorf("reconcile: listing workspaces: %w", err))
		return
	}
	for _, w := range wss {
		if m.isBusy(w.ID) || !m.mine(w.Node) {
			continue
		}
		ev := store.Event{RepoID: w.RepoID, WorkspaceID: w.ID}
		switch w.State {
		case store.WorkspaceCreating, store.WorkspaceRemoving:
			l := m.lock(w.ID)
			if !l.TryLock() {
				continue
			}
			cur, err := m.st.GetWorkspace(ctx, w.ID)
			if err == nil && cur.State == w.State && !m.isBusy(w.ID) {
				if err := m.finishRemove(ctx, cur); err != nil {
					p.fail(fmt.Errorf("reconcile: %w", err))
				} else {
					p.repaired(ctx, RepairWorkspaceRolledBack, w.ID, "unfinished "+w.State, ev)
				}
			}
			l.Unlock()
		case store.WorkspaceReady:
			drv, err := driverOf(w)
			if err != nil {
				p.fail(fmt.Errorf("reconcile: workspace %s: %w", w.ID, err))
				continue
			}
			if ok, err := drv.Attached(w.Dir); err == nil && ok {
				continue
			}
			did, err := m.attachAs(ctx, w, drv, "daemon", "reconcile."+RepairWorkspaceRemounted)
			if err != nil {
				if !errors.Is(err, errdefs.ErrConflict) { // removed meanwhile
					p.fail(fmt.Errorf("reconcile: %w", err))
				}
				continue
			}
			if did {
				// attachAs recorded the event; count and report it.
				m.log.InfoContext(ctx, "reconciler repair", "kind", RepairWorkspaceRemounted, "object", w.ID)
				m.countRepair(RepairWorkspaceRemounted)
				p.repairs = append(p.repairs, Repair{Kind: RepairWorkspaceRemounted, Object: w.ID, Reason: "files not mounted"})
			}
		}
	}
}

// wsOf returns the workspace ID that path (under the workspaces dir)
// belongs to, or "".
func (m *Manager) wsOf(path string) string {
	rel, err := filepath.Rel(m.wsDir, path)
	if err != nil || rel == "." || strings.HasPrefix(rel, "..") {
		return ""
	}
	id, _, _ := strings.Cut(rel, string(filepath.Separator))
	if !ids.HasPrefix(id, "ws") {
		return ""
	}
	return id
}

// orphanWorkspace reports whether workspace id has no row and nothing of
// this process is making it.
func (p *pass) orphanWorkspace(ctx context.Context, id string) bool {
	_, err := p.m.st.GetWorkspace(ctx, id)
	if err != nil && !errors.Is(err, errdefs.ErrNotFound) {
		p.fail(fmt.Errorf("reconcile: workspace %s: %w", id, err))
		return false
	}
	return err != nil && !p.m.isBusy(id)
}

// mounts detaches the mounts under the workspaces dir that belong to no
// workspace, deepest first.
func (p *pass) mounts(ctx context.Context, snap seen) {
	m := p.m
	pts := slices.Clone(snap.mounts)
	slices.SortFunc(pts, func(a, b string) int { return len(b) - len(a) })
	for _, mp := range pts {
		id := m.wsOf(mp)
		if id == "" || !p.orphanWorkspace(ctx, id) {
			continue
		}
		if err := unix.Unmount(mp, unix.MNT_DETACH|unix.UMOUNT_NOFOLLOW); err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
			p.fail(fmt.Errorf("reconcile: unmounting %s: %w", mp, err))
			continue
		}
		p.repaired(ctx, RepairMountRemoved, mp, "no workspace "+id, store.Event{WorkspaceID: id})
	}
}

// dirs removes the directories under the data dir that no row owns.
func (p *pass) dirs(ctx context.Context, snap seen) {
	m := p.m
	for _, dir := range snap.wsDirs {
		id := m.wsOf(dir)
		if id == "" || !p.orphanWorkspace(ctx, id) {
			continue
		}
		// Never delete through a mount: what is mounted there is not ours.
		if pts, err := mountinfo.Under(dir); err != nil || len(pts) > 0 {
			p.fail(fmt.Errorf("reconcile: orphan workspace directory %s is still mounted: %v", dir, pts))
			continue
		}
		p.removeDir(ctx, dir, "no workspace "+id, store.Event{WorkspaceID: id})
	}
	for _, dir := range snap.sbDirs {
		id := filepath.Base(dir)
		if !ids.HasPrefix(id, "sb") || m.isBusy(id) {
			continue
		}
		sb, err := m.st.GetSandbox(ctx, id)
		reason := "no sandbox row"
		switch {
		case err == nil:
			if st := sandbox.State(sb.State); st == sandbox.StateRunning || st == sandbox.StateCreating {
				continue
			}
			reason = "its sandbox is " + sb.State
		case !errors.Is(err, errdefs.ErrNotFound):
			p.fail(fmt.Errorf("reconcile: sandbox %s: %w", id, err))
			continue
		}
		if m.isBusy(id) {
			continue
		}
		p.removeDir(ctx, dir, reason, store.Event{WorkspaceID: sb.WorkspaceID, SandboxID: id})
	}
	repos, err := m.st.ListRepos(ctx)
	if err != nil {
		p.fail(fmt.Errorf("reconcile: listing repos: %w", err))
		return
	}
	pcs, err := m.st.ListPristines(ctx, "")
	if err != nil {
		p.fail(fmt.Errorf("reconcile: listing pristine checkouts: %w", err))
		return
	}
	// By name, not by path: rows recorded under another path of the same
	// data dir (a symlink, a move) must not make every mirror an orphan.
	known := map[string]bool{}
	for _, r := range repos {
		known[filepath.Base(r.Path)] = true
	}
	for _, pc := range pcs {
		known[filepath.Base(pc.Path)] = true
	}
	suspects := map[string]bool{}
	for _, dir := range append(slices.Clone(snap.repoDirs), snap.pcDirs...) {
		if known[filepath.Base(dir)] {
			continue
		}
		if !p.atStart && !m.rec.suspects[dir] {
			suspects[dir] = true // a clone may be recording it: next pass
			continue
		}
		p.removeDir(ctx, dir, "no repo or pristine row", store.Event{})
	}
	m.rec.suspects = suspects
}

func (p *pass) removeDir(ctx context.Context, dir, reason string, ev store.Event) {
	if _, err := os.Lstat(dir); errors.Is(err, os.ErrNotExist) {
		return // gone with its object earlier in this pass: no repair
	}
	if err := os.RemoveAll(dir); err != nil {
		p.fail(fmt.Errorf("reconcile: removing %s: %w", dir, err))
		return
	}
	p.repaired(ctx, RepairDirRemoved, dir, reason, ev)
}

// pristines forgets the unused pristine rows whose checkout is gone, so
// that the next workspace of that commit makes a new one.
func (p *pass) pristines(ctx context.Context) {
	m := p.m
	pcs, err := m.st.ListPristines(ctx, "")
	if err != nil {
		p.fail(fmt.Errorf("reconcile: listing pristine checkouts: %w", err))
		return
	}
	for _, pc := range pcs {
		if !m.ownPath(pc.Path) {
			continue // another node's checkout, on its disk
		}
		if _, err := os.Lstat(pc.Path); !errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err := m.st.DeletePristine(ctx, pc.ID); err != nil {
			if !errors.Is(err, errdefs.ErrConflict) && !errors.Is(err, errdefs.ErrNotFound) {
				p.fail(fmt.Errorf("reconcile: pristine %s: %w", pc.ID, err))
			} else if errors.Is(err, errdefs.ErrConflict) {
				m.log.ErrorContext(ctx, "pristine checkout missing but still used", "pristine_id", pc.ID, "path", pc.Path)
			}
			continue
		}
		p.repaired(ctx, RepairPristineForgotten, pc.ID, "checkout "+pc.Path+" is gone", store.Event{RepoID: pc.RepoID})
	}
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
