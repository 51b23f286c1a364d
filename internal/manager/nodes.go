package manager

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/agentbox/agentbox/internal/apitypes"
	"github.com/agentbox/agentbox/internal/store"
)

// ListNodes lists the daemons sharing the store, judged now.
func (m *Manager) ListNodes(ctx context.Context) ([]store.Node, error) {
	return m.st.ListNodes(ctx, m.clock(ctx))
}

// clock is the store's time (see store.NodeStore.Clock), or this
// machine's when the store does not answer.
func (m *Manager) clock(ctx context.Context) time.Time {
	if t, err := m.st.Clock(ctx); err == nil {
		return t
	}
	return time.Now().UTC()
}

// TakeOver is what a surviving node does about the nodes whose heartbeat
// has lapsed: their creating and running sandboxes are marked lost (their
// commands with them), and, when this node and the lost one both keep
// their workspaces on shared storage, the lost one's plain copy-driver
// workspaces become this node's. Every step is a guarded update in the
// store, so survivors doing it at once each take a share and never the
// same object; a node that beats again before the update keeps its own.
// The others' workspaces stay with their node and are reported
// unavailable, naming it, until it comes back. It returns the sandboxes
// marked lost and the workspaces adopted.
func (m *Manager) TakeOver(ctx context.Context) (lost, adopted []string, err error) {
	if m.cfg.NodeID == "" {
		return nil, nil, nil
	}
	// The store's clock, which is also the beats': another machine's
	// skew must not make a live node look lost.
	now, err := m.st.Clock(ctx)
	if err != nil {
		return nil, nil, err
	}
	nodes, err := m.st.ListNodes(ctx, now)
	if err != nil {
		return nil, nil, err
	}
	var self store.Node
	for _, n := range nodes {
		if n.ID == m.cfg.NodeID {
			self = n
		}
	}
	if self.State != apitypes.NodeUp {
		// This node is itself past its lease (a slow store): it must not
		// judge the others before it has beaten again.
		return nil, nil, nil
	}
	var errs []error
	actor := "node " + m.cfg.NodeID
	for _, n := range nodes {
		if n.ID == m.cfg.NodeID || n.State != apitypes.NodeLost {
			continue
		}
		if n.Sandboxes > 0 {
			ids, err := m.st.MarkNodeLost(ctx, n.ID, now, actor)
			if err != nil {
				errs = append(errs, err)
			}
			for _, id := range ids {
				if sb, err := m.st.GetSandbox(ctx, id); err == nil {
					m.loseExecs(ctx, sb)
				}
				m.countRepair(RepairSandboxLost)
			}
			if len(ids) > 0 {
				m.log.WarnContext(ctx, "marked the sandboxes of a lost node lost", "node_id", n.ID, "sandboxes", len(ids), "last_heartbeat", n.HeartbeatAt)
			}
			lost = append(lost, ids...)
		}
		if !self.Shared || !n.Shared || n.Workspaces == 0 {
			continue
		}
		// Each shared survivor takes its share per pass; what is left
		// goes at the next passes.
		shared := 0
		for _, o := range nodes {
			if o.State == apitypes.NodeUp && o.Shared {
				shared++
			}
		}
		share := (n.Workspaces + shared - 1) / max(shared, 1)
		wss, err := m.st.AdoptWorkspaces(ctx, n.ID, m.cfg.NodeID, now, share)
		if err != nil {
			errs = append(errs, err)
		}
		for _, w := range wss {
			if err := m.adopt(ctx, w); err != nil {
				errs = append(errs, err)
			}
			adopted = append(adopted, w.ID)
		}
		if len(wss) > 0 {
			m.log.WarnContext(ctx, "adopted the workspaces of a lost node", "node_id", n.ID, "workspaces", len(wss))
		}
	}
	return lost, adopted, errors.Join(errs...)
}

// adopt makes an adopted workspace usable here: its files must be where
// the lost node kept them (a shared path), and temp files of writes the
// lost node left half done are swept.
func (m *Manager) adopt(ctx context.Context, w store.Workspace) error {
	if _, err := os.Stat(w.Dir); err != nil {
		return fmt.Errorf("adopted workspace %s: its directory is not reachable from this node: %w", w.ID, err)
	}
	drv, err := driverOf(w)
	if err != nil {
		return err
	}
	if _, err := m.attach(ctx, w, drv, "node "+m.cfg.NodeID); err != nil {
		return fmt.Errorf("adopted workspace %s: %w", w.ID, err)
	}
	m.sweep(ctx, drv, w)
	return nil
}

// RunTakeOver runs TakeOver every interval until ctx ends.
func (m *Manager) RunTakeOver(ctx context.Context, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if _, _, err := m.TakeOver(ctx); err != nil && ctx.Err() == nil {
			m.log.WarnContext(ctx, "taking over lost nodes", "err", err)
		}
	}
}
