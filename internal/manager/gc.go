package manager

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/agentbox/agentbox/internal/apitypes"
	"github.com/agentbox/agentbox/internal/diskusage"
	"github.com/agentbox/agentbox/internal/errdefs"
	"github.com/agentbox/agentbox/internal/mountinfo"
	"github.com/agentbox/agentbox/internal/sandbox"
	"github.com/agentbox/agentbox/internal/store"
	"github.com/agentbox/agentbox/internal/workspace"
)

// What the collector removes, as GCItem.Kind and the metric's label.
const (
	GCSandbox   = "sandbox"
	GCPristine  = "pristine"
	GCRepo      = "repo"
	GCWorkspace = "workspace"
	// GCImage is an unpacked image in a backend's cache (outside the data
	// dir): its ID is the image id.
	GCImage = "image"
)

// GCKinds are every kind, in tier order.
var GCKinds = []string{GCImage, GCSandbox, GCPristine, GCRepo, GCWorkspace}

// The collector's tiers, in the order it goes through them.
const (
	// TierImages: unpacked images (the local backend's cache, outside the
	// data dir) whose image is gone from the engine or from the path that
	// named it and that no sandbox runs from. They are garbage whatever
	// the budget: every run removes them, and their bytes do not count
	// against the data dir's usage.
	TierImages = 0
	// TierSandboxes: what is left of stopped and lost sandboxes, then
	// running sandboxes that are idle (no command running, no activity for
	// Config.IdleTimeout). Their workspaces stay.
	TierSandboxes = 1
	// TierPristine: pristine checkouts no workspace stacks on, least
	// recently used first.
	TierPristine = 2
	// TierRepos: repo caches no workspace depends on, least recently used
	// first.
	TierRepos = 3
	// TierWorkspaces: clean workspaces unused for Config.WorkspaceRetention
	// (never without it). A workspace with any change is never removed.
	TierWorkspaces = 4
)

// GCObserver is an optional ability of Config.Observer: told of every
// removal the collector makes (the daemon's agentbox_gc_removals_total).
type GCObserver interface {
	ObserveGCRemoval(kind string)
}

// GCRequest asks for one collection.
type GCRequest struct {
	// DryRun lists what would go and removes nothing.
	DryRun bool `json:"dry_run,omitempty"`
	// Budget, when positive, is the budget of this run in bytes instead of
	// Config.DataBudget.
	Budget int64 `json:"budget,omitempty"`
}

// GCItem is one object the collector removed, or would remove; Tier is
// one of the Tier constants, Kind one of the GC kinds.
type GCItem = apitypes.GCItem

// GCReport is the outcome of one collection.
type GCReport = apitypes.GCReport

// errGCSkip says a candidate no longer qualifies when looked at again
// under its lock (used since, changed since): it is left alone.
var errGCSkip = errors.New("no longer collectable")

// gcCandidate is one object a tier offers.
type gcCandidate struct {
	item GCItem
	// size measures item.Bytes when the candidate is reached.
	size func() (int64, error)
	// remove removes it (a real run); errGCSkip leaves it.
	remove func(ctx context.Context) error
	// planned is called when the candidate is taken (dry run or not), so
	// that later tiers see it as gone.
	planned func()
}

// gcRun is the state of one collection.
type gcRun struct {
	m      *Manager
	now    time.Time
	dryRun bool
	rep    *GCReport
	usage  int64
	budget int64
	// goneWS and gonePC are the workspaces and pristine checkouts this
	// run removed or, in a dry run, would remove; plannedPC the bytes of
	// each such checkout.
	goneWS    map[string]bool
	gonePC    map[string]int64
	goneRepos map[string]bool
	// measuredAt is FreedBytes when usage was last measured again.
	measuredAt int64
}

// touch records that an operation on workspace id is starting: the
// collector's notion of a workspace's last use, kept in memory so that
// reads cost no database write. It is set before the operation reads the
// workspace's state (see ready and gcWorkspace).
func (m *Manager) touch(id string) { m.touched.Store(id, time.Now().UTC()) }

func (m *Manager) lastTouch(id string) time.Time {
	if v, ok := m.touched.Load(id); ok {
		return v.(time.Time)
	}
	return time.Time{}
}

// GC collects disk under the data dir's budget: when usage is over it,
// it removes, tier by tier (see the Tier constants), until usage is within
// it again. Each removal is a gc.removed event. A dry run lists what would
// go, in the same order, and changes nothing. now is the clock idleness
// and retention are measured against.
func (m *Manager) GC(ctx context.Context, req GCRequest, now time.Time) (GCReport, error) {
	budget := req.Budget
	if budget <= 0 {
		budget = m.cfg.DataBudget
	}
	if budget <= 0 {
		return GCReport{}, errdefs.Invalid("no data budget: the daemon has no data_budget configured and the request gives none")
	}
	m.gcMu.Lock()
	defer m.gcMu.Unlock()
	u, err := diskusage.Measure(m.cfg.DataDir)
	if err != nil {
		return GCReport{}, fmt.Errorf("measuring data dir %s: %w", m.cfg.DataDir, err)
	}
	rep := GCReport{DryRun: req.DryRun, BudgetBytes: budget, UsageBytes: u.Bytes, Method: u.Method, Items: []GCItem{}}
	r := &gcRun{m: m, now: now, dryRun: req.DryRun, rep: &rep, usage: u.Bytes, budget: budget,
		goneWS: map[string]bool{}, gonePC: map[string]int64{}, goneRepos: map[string]bool{}}
	r.images(ctx)
	// Removing workspaces frees their checkouts and repos in turn: the
	// checkout and repo tiers run again after them.
	tiers := []func(context.Context) ([]gcCandidate, error){r.sandboxes, r.pristines, r.repos, r.workspaces, r.pristines, r.repos}
	for _, tier := range tiers {
		if r.usage <= budget && !r.remeasure() {
			break
		}
		cands, err := tier(ctx)
		if err != nil {
			return rep, err
		}
		for _, c := range cands {
			if r.usage <= budget && !r.remeasure() {
				break
			}
			if err := ctx.Err(); err != nil {
				return rep, err
			}
			r.take(ctx, c)
		}
	}
	rep.AfterBytes = rep.UsageBytes - rep.FreedBytes
	if !req.DryRun && len(rep.Items) > 0 {
		if u, err := diskusage.Measure(m.cfg.DataDir); err == nil {
			rep.AfterBytes = u.Bytes
		}
	}
	rep.UnderBudget = rep.AfterBytes <= budget
	if len(rep.Items) > 0 || !rep.UnderBudget {
		m.log.InfoContext(ctx, "disk collection", "dry_run", req.DryRun, "usage", rep.UsageBytes, "budget", budget,
			"freed", rep.FreedBytes, "after", rep.AfterBytes, "removed", len(rep.Items))
	}
	return rep, nil
}

// take measures, removes (unless a dry run) and reports one candidate.
func (r *gcRun) take(ctx context.Context, c gcCandidate) {
	n, err := c.size()
	if errors.Is(err, errGCSkip) {
		r.m.log.DebugContext(ctx, "collector: left alone", "kind", c.item.Kind, "id", c.item.ID, "why", err)
		return
	} else if err != nil {
		r.m.log.WarnContext(ctx, "collector: measuring", "kind", c.item.Kind, "id", c.item.ID, "err", err)
		return
	}
	c.item.Bytes = n
	if !r.dryRun {
		if err := c.remove(ctx); errors.Is(err, errGCSkip) {
			r.m.log.DebugContext(ctx, "collector: left alone", "kind", c.item.Kind, "id", c.item.ID, "why", err)
			return
		} else if err != nil {
			c.item.Error = err.Error()
			r.rep.Items = append(r.rep.Items, c.item)
			r.m.log.WarnContext(ctx, "collector: removing", "kind", c.item.Kind, "id", c.item.ID, "err", err)
			return
		}
		c.item.Removed = true
		e := store.Event{Actor: "gc", Type: "gc.removed"}
		switch c.item.Kind {
		case GCSandbox:
			e.SandboxID = c.item.ID
		case GCRepo:
			e.RepoID = c.item.ID
		case GCWorkspace:
			e.WorkspaceID = c.item.ID
		}
		r.m.event(ctx, e, map[string]any{"kind": c.item.Kind, "id": c.item.ID, "bytes": n, "reason": c.item.Reason, "tier": c.item.Tier})
		if o, ok := r.m.cfg.Observer.(GCObserver); ok {
			o.ObserveGCRemoval(c.item.Kind)
		}
		r.m.log.InfoContext(ctx, "collector removed", "kind", c.item.Kind, "id", c.item.ID, "bytes", n, "reason", c.item.Reason)
	}
	if c.planned != nil {
		c.planned()
	}
	r.rep.Items = append(r.rep.Items, c.item)
	r.rep.FreedBytes += n
	r.usage -= n
	// A file system of its own is measured again: exact, and cheap.
	if !r.dryRun && r.rep.Method == diskusage.MethodStatfs {
		if u, err := diskusage.Measure(r.m.cfg.DataDir); err == nil {
			r.usage = u.Bytes
		}
	}
}

// remeasure is called when the running estimate (usage less what was
// freed) is within the budget: after a real run's removals it measures
// again, since what the removals wrote (the database's log) or what
// others wrote meanwhile counts too, and says whether usage is still over.
func (r *gcRun) remeasure() bool {
	if r.dryRun || r.rep.FreedBytes == 0 || r.measuredAt == r.rep.FreedBytes {
		return false
	}
	r.measuredAt = r.rep.FreedBytes
	u, err := diskusage.Measure(r.m.cfg.DataDir)
	if err != nil {
		return false
	}
	r.usage = u.Bytes
	return r.usage > r.budget
}

// since is how long ago t was, for reasons.
func (r *gcRun) since(t time.Time) string { return r.now.Sub(t).Round(time.Second).String() }

// removeDir deletes a directory the collector owns, refusing one with
// anything mounted inside (RemoveAll would delete the mounted files).
func removeDir(dir string) error {
	mps, err := mountinfo.Under(dir)
	if err != nil {
		return err
	}
	if len(mps) > 0 {
		return fmt.Errorf("%s has %s mounted inside: %w", dir, mps[0], errdefs.ErrConflict)
	}
	if err := os.RemoveAll(dir); err != nil {
		return fmt.Errorf("removing %s: %w", dir, err)
	}
	return nil
}

// --- tier 0: unpacked images

// images asks every backend that keeps unpacked images to collect them.
// Its removals are reported and logged like the tiers', but their bytes
// are not the data dir's, so they leave the budget's accounting alone.
func (r *gcRun) images(ctx context.Context) {
	m := r.m
	for _, name := range slices.Sorted(maps.Keys(m.cfg.Backends)) {
		ic, ok := m.cfg.Backends[name].(sandbox.ImageCollector)
		if !ok {
			continue
		}
		items, err := ic.CollectImages(ctx, r.dryRun)
		if err != nil {
			m.log.WarnContext(ctx, "collector: unpacked images", "backend", name, "err", err)
		}
		for _, it := range items {
			item := GCItem{Tier: TierImages, Kind: GCImage, ID: it.ID, Bytes: it.Bytes, Removed: it.Removed, Error: it.Error,
				Reason: fmt.Sprintf("%s image %s unpacked for the %s backend: %s", it.Name, it.ID, name, it.Reason)}
			if item.ID == "" {
				item.ID = it.Name
			}
			r.rep.Items = append(r.rep.Items, item)
			if !it.Removed {
				continue
			}
			m.event(ctx, store.Event{Actor: "gc", Type: "gc.removed"}, map[string]any{"kind": GCImage, "id": item.ID, "bytes": it.Bytes, "reason": item.Reason, "tier": TierImages})
			if o, ok := m.cfg.Observer.(GCObserver); ok {
				o.ObserveGCRemoval(GCImage)
			}
			m.log.InfoContext(ctx, "collector removed", "kind", GCImage, "id", item.ID, "bytes", it.Bytes, "reason", item.Reason)
		}
	}
}

// --- tier 1: sandboxes

func (r *gcRun) sandboxes(ctx context.Context) ([]gcCandidate, error) {
	m := r.m
	sbs, err := m.st.ListSandboxes(ctx, store.SandboxFilter{})
	if err != nil {
		return nil, err
	}
	var left, idle []gcCandidate
	for _, sb := range sbs {
		if !m.mine(sb.Node) {
			continue
		}
		dir := m.sandboxDir(sb.ID)
		size := func() (int64, error) { return diskusage.Exclusive(dir) }
		switch sandbox.State(sb.State) {
		case sandbox.StateStopped, sandbox.StateLost:
			if _, err := os.Lstat(dir); err != nil {
				continue // nothing left of it
			}
			left = append(left, gcCandidate{
				item:   GCItem{Tier: TierSandboxes, Kind: GCSandbox, ID: sb.ID, Reason: fmt.Sprintf("sandbox is %s; its run directory was left behind", sb.State)},
				size:   size,
				remove: func(ctx context.Context) error { return m.gcLeftovers(ctx, sb.ID) },
			})
		case sandbox.StateRunning:
			if !m.idle(sb, r.now) {
				continue
			}
			idle = append(idle, gcCandidate{
				item: GCItem{Tier: TierSandboxes, Kind: GCSandbox, ID: sb.ID,
					Reason: fmt.Sprintf("running but idle: no command running and no activity for %s (idle timeout %s); its workspace stays", r.since(sb.LastActivityAt), m.cfg.IdleTimeout)},
				size: size,
				remove: func(ctx context.Context) error {
					if !m.evictOne(ctx, sb, r.now) {
						return errGCSkip
					}
					return nil
				},
			})
		}
	}
	slices.SortStableFunc(idle, func(a, b gcCandidate) int {
		return lastActivity(sbs, a.item.ID).Compare(lastActivity(sbs, b.item.ID))
	})
	return append(left, idle...), nil
}

func lastActivity(sbs []store.Sandbox, id string) time.Time {
	for _, sb := range sbs {
		if sb.ID == id {
			return sb.LastActivityAt
		}
	}
	return time.Time{}
}

// idle is the evictor's notion: no command running and no API activity
// for Config.IdleTimeout (off when that is not set).
func (m *Manager) idle(sb store.Sandbox, now time.Time) bool {
	if m.cfg.IdleTimeout <= 0 || now.Sub(sb.LastActivityAt) <= m.cfg.IdleTimeout {
		return false
	}
	m.liveMu.Lock()
	lv, ok := m.live[sb.ID]
	m.liveMu.Unlock()
	return !ok || lv.inflight.Load() == 0
}

// gcLeftovers removes what a stopped or lost sandbox left: its
// environment, if the backend still has it, and its run directory.
func (m *Manager) gcLeftovers(ctx context.Context, id string) error {
	sb, err := m.st.GetSandbox(ctx, id)
	if err != nil {
		return errGCSkip
	}
	l := m.lock("sb:" + sb.WorkspaceID)
	l.Lock()
	defer l.Unlock()
	if sb, err = m.st.GetSandbox(ctx, id); err != nil || (sb.State != string(sandbox.StateStopped) && sb.State != string(sandbox.StateLost)) {
		return errGCSkip
	}
	if sb.BackendRef != "" {
		if be, err := m.backend(sb.Backend); err == nil {
			if err := be.Remove(ctx, sb.BackendRef); err != nil && !errors.Is(err, errdefs.ErrNotFound) {
				return fmt.Errorf("removing sandbox %s: %w", id, err)
			}
		}
	}
	return removeDir(m.sandboxDir(id))
}

// --- tiers 2 and 3: pristine checkouts and repos

// users counts, per pristine checkout and per repo, the workspaces that
// use it and are not gone in this run.
func (r *gcRun) users(ctx context.Context) (byPC, byRepo map[string]int, err error) {
	wss, err := r.m.st.ListWorkspaces(ctx, "")
	if err != nil {
		return nil, nil, err
	}
	byPC, byRepo = map[string]int{}, map[string]int{}
	for _, w := range wss {
		if r.goneWS[w.ID] {
			continue
		}
		byRepo[w.RepoID]++
		if w.PristineID != "" {
			byPC[w.PristineID]++
		}
	}
	return byPC, byRepo, nil
}

func (r *gcRun) pristines(ctx context.Context) ([]gcCandidate, error) {
	m := r.m
	byPC, _, err := r.users(ctx)
	if err != nil {
		return nil, err
	}
	pcs, err := m.st.ListPristines(ctx, "")
	if err != nil {
		return nil, err
	}
	slices.SortStableFunc(pcs, func(a, b store.Pristine) int { return a.LastUsedAt.Compare(b.LastUsedAt) })
	var out []gcCandidate
	for _, p := range pcs {
		if byPC[p.ID] > 0 || !m.ownPath(p.Path) {
			continue
		}
		if _, taken := r.gonePC[p.ID]; taken || r.goneRepos[p.RepoID] {
			continue
		}
		var bytes int64
		out = append(out, gcCandidate{
			item: GCItem{Tier: TierPristine, Kind: GCPristine, ID: p.ID,
				Reason: fmt.Sprintf("no workspace uses this checkout of %s at %.12s; last used %s ago", p.RepoID, p.Commit, r.since(p.LastUsedAt))},
			size: func() (int64, error) {
				n, err := diskusage.Exclusive(p.Path)
				bytes = n
				return n, err
			},
			remove:  func(ctx context.Context) error { return m.gcPristine(ctx, p.ID) },
			planned: func() { r.gonePC[p.ID] = bytes },
		})
	}
	return out, nil
}

// gcPristine removes an unused pristine checkout. The repo's use lock
// keeps a workspace creation from picking the checkout meanwhile.
func (m *Manager) gcPristine(ctx context.Context, id string) error {
	p, err := m.st.GetPristine(ctx, id)
	if err != nil {
		return errGCSkip
	}
	l := m.lock("use:" + p.RepoID)
	l.Lock()
	if p, err = m.st.GetPristine(ctx, id); err != nil || p.RefCount > 0 {
		l.Unlock()
		return errGCSkip
	}
	if mps, err := mountinfo.Under(p.Path); err != nil || len(mps) > 0 {
		l.Unlock()
		return fmt.Errorf("pristine checkout %s: something is mounted inside %s: %w", id, p.Path, errdefs.ErrConflict)
	}
	if err := m.st.DeletePristine(ctx, id); err != nil {
		l.Unlock()
		if errors.Is(err, errdefs.ErrConflict) {
			return errGCSkip
		}
		return err
	}
	// Out of the way under the lock, deleted after it: the row is gone, so
	// the next workspace on this commit makes a new checkout.
	trash := filepath.Join(filepath.Dir(p.Path), ".gc-"+id)
	renamed := os.Rename(p.Path, trash) == nil
	l.Unlock()
	if !renamed {
		trash = p.Path
	}
	if err := os.RemoveAll(trash); err != nil {
		return fmt.Errorf("removing pristine checkout %s: %w", id, err)
	}
	return nil
}

func (r *gcRun) repos(ctx context.Context) ([]gcCandidate, error) {
	m := r.m
	_, byRepo, err := r.users(ctx)
	if err != nil {
		return nil, err
	}
	repos, err := m.st.ListRepos(ctx)
	if err != nil {
		return nil, err
	}
	slices.SortStableFunc(repos, func(a, b store.Repo) int { return a.LastUsedAt.Compare(b.LastUsedAt) })
	var out []gcCandidate
	for _, repo := range repos {
		if byRepo[repo.ID] > 0 || r.goneRepos[repo.ID] || !m.ownPath(repo.Path) {
			continue
		}
		out = append(out, gcCandidate{
			item: GCItem{Tier: TierRepos, Kind: GCRepo, ID: repo.ID,
				Reason: fmt.Sprintf("no workspace depends on the cache of %s; least recently used (last used %s ago)", repo.URL, r.since(repo.LastUsedAt))},
			size: func() (int64, error) {
				pcs, err := m.st.ListPristines(ctx, repo.ID)
				if err != nil {
					return 0, err
				}
				// The checkouts go with the repo; those already counted
				// (in a dry run, still on disk) are not counted twice.
				paths := []string{repo.Path}
				var counted int64
				for _, p := range pcs {
					paths = append(paths, p.Path)
					counted += r.gonePC[p.ID]
				}
				n, err := diskusage.Exclusive(paths...)
				return max(n-counted, 0), err
			},
			remove:  func(ctx context.Context) error { return m.gcRepo(ctx, repo.ID) },
			planned: func() { r.goneRepos[repo.ID] = true },
		})
	}
	return out, nil
}

// gcRepo removes a repo cache no workspace depends on, under its use lock.
func (m *Manager) gcRepo(ctx context.Context, id string) error {
	l := m.lock("use:" + id)
	l.Lock()
	defer l.Unlock()
	wss, err := m.st.ListWorkspaces(ctx, id)
	if err != nil || len(wss) > 0 {
		return errGCSkip
	}
	pcs, err := m.st.ListPristines(ctx, id)
	if err != nil {
		return err
	}
	for _, p := range pcs {
		if mps, err := mountinfo.Under(p.Path); err != nil || len(mps) > 0 {
			return fmt.Errorf("repo %s: something is mounted inside %s: %w", id, p.Path, errdefs.ErrConflict)
		}
	}
	if err := m.cache.Remove(ctx, id); err != nil {
		if errors.Is(err, errdefs.ErrConflict) || errors.Is(err, errdefs.ErrNotFound) {
			return errGCSkip
		}
		return err
	}
	return nil
}

// useRepo holds repo id against the collector while a workspace is made
// from it (from choosing its pristine checkout to recording the
// workspace's row), and checks that the repo is still there.
func (m *Manager) useRepo(ctx context.Context, id string) (release func(), err error) {
	l := m.lock("use:" + id)
	l.RLock()
	if _, err := m.st.GetRepo(ctx, id); err != nil {
		l.RUnlock()
		return nil, err
	}
	return l.RUnlock, nil
}

// --- tier 4: workspaces

func (r *gcRun) workspaces(ctx context.Context) ([]gcCandidate, error) {
	m := r.m
	retention := m.cfg.WorkspaceRetention
	if retention <= 0 {
		return nil, nil
	}
	wss, err := m.st.ListWorkspaces(ctx, "")
	if err != nil {
		return nil, err
	}
	type cand struct {
		w       store.Workspace
		used    time.Time
		touched time.Time
	}
	var cs []cand
	for _, w := range wss {
		if w.State != store.WorkspaceReady || r.goneWS[w.ID] || !m.mine(w.Node) {
			continue
		}
		touched := m.lastTouch(w.ID)
		used, busy, err := m.lastUse(ctx, w, touched)
		if err != nil {
			return nil, err
		}
		if busy || r.now.Sub(used) < retention {
			continue
		}
		cs = append(cs, cand{w, used, touched})
	}
	slices.SortStableFunc(cs, func(a, b cand) int { return a.used.Compare(b.used) })
	var out []gcCandidate
	for _, c := range cs {
		reason := fmt.Sprintf("clean (no change since base commit %.12s) and unused for %s, over the workspace retention of %s", c.w.BaseCommit, r.since(c.used), retention)
		clean := false
		out = append(out, gcCandidate{
			item: GCItem{Tier: TierWorkspaces, Kind: GCWorkspace, ID: c.w.ID, Reason: reason},
			size: func() (int64, error) {
				// Whether it is clean is decided here, when the tier is
				// reached, and again under its lock before it goes.
				ok, err := m.workspaceClean(ctx, c.w, !r.dryRun)
				if err != nil || !ok {
					return 0, fmt.Errorf("workspace %s: not clean: %w", c.w.ID, errGCSkip)
				}
				clean = true
				return diskusage.Exclusive(c.w.Dir)
			},
			remove: func(ctx context.Context) error {
				if !clean {
					return errGCSkip
				}
				return m.gcWorkspace(ctx, c.w.ID, c.touched)
			},
			planned: func() { r.goneWS[c.w.ID] = true },
		})
	}
	return out, nil
}

// lastUse is when workspace w was last used: made, changed, touched by an
// operation (touched, this daemon's memory of reads), used by a command
// or a sandbox, or named by an API event. busy says a command runs in it
// now.
func (m *Manager) lastUse(ctx context.Context, w store.Workspace, touched time.Time) (used time.Time, busy bool, err error) {
	used = latest(w.CreatedAt, w.UpdatedAt, touched)
	sbs, err := m.st.ListSandboxes(ctx, store.SandboxFilter{WorkspaceID: w.ID})
	if err != nil {
		return used, false, err
	}
	for _, sb := range sbs {
		used = latest(used, sb.CreatedAt, sb.LastActivityAt)
		m.liveMu.Lock()
		lv, ok := m.live[sb.ID]
		m.liveMu.Unlock()
		if ok && lv.inflight.Load() > 0 {
			busy = true
		}
	}
	for after := int64(0); ; {
		evs, err := m.st.ListEvents(ctx, store.EventFilter{WorkspaceID: w.ID, AfterID: after, Limit: 10000})
		if err != nil {
			return used, busy, err
		}
		for _, e := range evs {
			if e.Actor == "api" {
				used = latest(used, e.Time)
			}
			after = e.ID
		}
		if len(evs) < 10000 {
			return used, busy, nil
		}
	}
}

func latest(ts ...time.Time) time.Time {
	var t time.Time
	for _, x := range ts {
		if x.After(t) {
			t = x
		}
	}
	return t
}

// workspaceClean says whether workspace w holds nothing of its own: no
// file differs from its base commit, HEAD is the base commit, and no
// local branch points anywhere else than the base commit or where the
// repo cache has the same branch. When its files are not mounted it is
// not clean unless attach may mount them (a real run); when unsure, it is
// not clean.
func (m *Manager) workspaceClean(ctx context.Context, w store.Workspace, attach bool) (bool, error) {
	l := m.lock(w.ID)
	l.Lock()
	defer l.Unlock()
	return m.cleanLocked(ctx, w, attach)
}

func (m *Manager) cleanLocked(ctx context.Context, w store.Workspace, attach bool) (bool, error) {
	drv, err := driverOf(w)
	if err != nil {
		return false, err
	}
	if ok, err := drv.Attached(w.Dir); err != nil {
		return false, err
	} else if !ok {
		if !attach {
			return false, nil
		}
		if _, err := m.attach(ctx, w, drv, "gc"); err != nil {
			return false, err
		}
	}
	changes, err := m.git(w, drv).Changes(ctx, w.BaseCommit)
	if err != nil || len(changes) > 0 {
		return false, err
	}
	_, head, err := workspace.Head(drv.Files(w.Dir))
	if err != nil || head != w.BaseCommit {
		return false, err
	}
	repo, err := m.st.GetRepo(ctx, w.RepoID)
	if err != nil {
		return false, err
	}
	ws, err := branchTips(drv.Files(w.Dir))
	if err != nil {
		return false, err
	}
	mirror, err := branchTips(repo.Path)
	if err != nil {
		return false, err
	}
	for name, tip := range ws {
		if tip != w.BaseCommit && mirror[name] != tip {
			return false, nil // a branch holding commits of its own
		}
	}
	return true, nil
}

// branchTips reads the local branches of the git repository at dir (a
// work tree with .git, or a bare mirror): loose refs, then packed ones.
// It reads through os.Root, never following a link out of dir.
func branchTips(dir string) (map[string]string, error) {
	root, err := os.OpenRoot(dir)
	if err != nil {
		return nil, err
	}
	defer root.Close()
	gitDir := ".git"
	if _, err := root.Stat(gitDir); err != nil {
		gitDir = "." // a bare repository
	}
	tips := map[string]string{}
	if b, err := root.ReadFile(gitDir + "/packed-refs"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			sha, ref, ok := strings.Cut(line, " ")
			if name, isHead := strings.CutPrefix(ref, "refs/heads/"); ok && isHead {
				tips[name] = sha
			}
		}
	}
	var walk func(rel string) error
	walk = func(rel string) error {
		f, err := root.Open(gitDir + "/" + rel)
		if err != nil {
			return nil
		}
		es, err := f.ReadDir(-1)
		f.Close()
		if err != nil {
			return err
		}
		for _, e := range es {
			p := rel + "/" + e.Name()
			switch {
			case e.IsDir():
				if err := walk(p); err != nil {
					return err
				}
			case e.Type().IsRegular():
				b, err := root.ReadFile(gitDir + "/" + p)
				if err != nil {
					return err
				}
				tips[strings.TrimPrefix(p, "refs/heads/")] = strings.TrimSpace(string(b))
			default:
				return fmt.Errorf("%s in %s is not a regular file", p, dir)
			}
		}
		return nil
	}
	return tips, walk("refs/heads")
}

// gcWorkspace removes a clean workspace. Under the workspace's lock (no
// file API write, status or fork runs) it is checked again; then, under
// its sandbox lock, it is marked removing, so that every operation from
// then on is refused, and anything that began since it was picked (a
// touch, a command) puts it back.
func (m *Manager) gcWorkspace(ctx context.Context, id string, touched time.Time) error {
	l := m.lock(id)
	l.Lock()
	defer l.Unlock()
	w, err := m.st.GetWorkspace(ctx, id)
	if err != nil || w.State != store.WorkspaceReady {
		return errGCSkip
	}
	if ok, err := m.cleanLocked(ctx, w, true); err != nil || !ok {
		return errGCSkip
	}
	sl := m.lock("sb:" + id)
	sl.Lock()
	_, busy, err := m.lastUse(ctx, w, touched)
	if err == nil && !busy {
		w.State, w.UpdatedAt = store.WorkspaceRemoving, time.Now().UTC()
		err = m.st.UpdateWorkspace(ctx, w)
	}
	// Read after the state says removing: an operation that touched it
	// later than this reads that state and stops.
	used := !m.lastTouch(id).Equal(touched)
	sl.Unlock()
	if err != nil || busy {
		return errGCSkip
	}
	if used {
		w.State = store.WorkspaceReady
		if err := m.st.UpdateWorkspace(ctx, w); err != nil {
			return err
		}
		return errGCSkip
	}
	if err := m.finishRemove(ctx, w); err != nil {
		return err
	}
	m.locksMu.Lock()
	delete(m.locks, id)
	m.locksMu.Unlock()
	m.touched.Delete(id)
	m.event(ctx, store.Event{Actor: "gc", Type: "workspace.removed", RepoID: w.RepoID, WorkspaceID: id}, nil)
	return nil
}

// RunGC collects under the budget every interval until ctx ends.
func (m *Manager) RunGC(ctx context.Context, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			if _, err := m.GC(ctx, GCRequest{}, now); err != nil && ctx.Err() == nil {
				m.log.WarnContext(ctx, "disk collection", "err", err)
			}
		}
	}
}
