package manager

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/agentbox/agentbox/internal/repocache"
	"github.com/agentbox/agentbox/internal/store"
	"github.com/agentbox/agentbox/internal/workspace"
)

// Recover repairs what a crash or a reboot left, before the daemon serves:
// creates that did not finish are rolled back, removals that did not finish
// are completed, and every ready workspace whose files are not mounted (a
// reboot, a manual umount) is mounted again. Each repair is an event.
func (m *Manager) Recover(ctx context.Context) error {
	for _, dir := range []string{filepath.Join(m.cfg.DataDir, "repos"), filepath.Join(m.cfg.DataDir, "pristine")} {
		entries, _ := os.ReadDir(dir)
		for _, e := range entries {
			if strings.HasPrefix(e.Name(), ".tmp-") {
				os.RemoveAll(filepath.Join(dir, e.Name()))
			}
		}
	}
	wss, err := m.st.ListWorkspaces(ctx, "")
	if err != nil {
		return fmt.Errorf("recovering: %w", err)
	}
	var errs []error
	for _, w := range wss {
		if !m.mine(w.Node) {
			continue
		}
		ev := store.Event{Actor: "daemon", RepoID: w.RepoID, WorkspaceID: w.ID}
		switch w.State {
		case store.WorkspaceCreating, store.WorkspaceRemoving:
			if err := m.finishRemove(ctx, w); err != nil {
				errs = append(errs, err)
				continue
			}
			ev.Type = "workspace.rolled_back"
			if w.State == store.WorkspaceRemoving {
				ev.Type = "workspace.removed"
			}
			m.event(ctx, ev, map[string]any{"reason": "unfinished " + w.State + " at start"})
			m.countRepair(RepairWorkspaceRolledBack)
		case store.WorkspaceReady:
			drv, err := driverOf(w)
			if err != nil {
				errs = append(errs, err)
				continue
			}
			// A daemon that died while forking it left it frozen, and
			// its sandbox's writers waiting (see workspace.Thaw).
			if did, err := workspace.Thaw(w.Dir); err != nil {
				errs = append(errs, err)
				continue
			} else if did {
				ev.Type = "workspace.thawed"
				m.event(ctx, ev, map[string]any{"reason": "frozen for a fork that did not finish"})
				m.countRepair(RepairWorkspaceThawed)
			}
			// Mounts again (and records it) when a reboot unmounted it.
			if did, err := m.attach(ctx, w, drv, "daemon"); err != nil {
				errs = append(errs, err)
				continue
			} else if did {
				m.countRepair(RepairWorkspaceRemounted)
			}
			m.sweep(ctx, drv, w)
		}
	}
	// The repo of an upload whose workspace a crash kept from being made
	// (or from being removed with its last workspace) serves nothing.
	if repos, err := m.st.ListRepos(ctx); err == nil {
		for _, r := range repos {
			if repocache.IsUpload(r.URL) && m.ownPath(r.Path) {
				m.dropUploadRepo(ctx, r.ID)
			}
		}
	}
	// A workspace that cannot be repaired is reported, not fatal: the
	// others must still be served.
	if err := errors.Join(errs...); err != nil {
		m.log.ErrorContext(ctx, "recovery incomplete", "err", err)
	}
	return nil
}

func (m *Manager) sweep(ctx context.Context, drv workspace.Driver, w store.Workspace) {
	if n := workspace.SweepTemp(drv, w.Dir); n > 0 {
		m.event(ctx, store.Event{Actor: "daemon", Type: "workspace.swept", RepoID: w.RepoID, WorkspaceID: w.ID},
			map[string]any{"temp_files": n, "reason": "interrupted writes"})
		m.log.InfoContext(ctx, "removed temp files of interrupted writes", KeyWorkspace, w.ID, "count", n)
	}
}
