package manager

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"time"

	"github.com/agentbox/agentbox/internal/apitypes"
	"github.com/agentbox/agentbox/internal/errdefs"
	"github.com/agentbox/agentbox/internal/store"
)

// Nodes sharing a store each own some objects (see store.NodeStore): a
// workspace belongs to the node whose disk holds its files, a sandbox to
// the node that runs it. A manager makes, repairs, collects and evicts
// only what its node owns; the API forwards a request about another
// node's object to that node. Without a node ID (tests, tools) a manager
// owns everything, as a daemon alone on its store always did.

// owningStore records the manager's node as the owner of every workspace
// and sandbox it makes.
type owningStore struct {
	store.Store
	node string
}

func (s owningStore) CreateWorkspace(ctx context.Context, w store.Workspace) error {
	if w.Node == "" {
		w.Node = s.node
	}
	return s.Store.CreateWorkspace(ctx, w)
}

func (s owningStore) CreateSandbox(ctx context.Context, sb store.Sandbox) error {
	if sb.Node == "" {
		sb.Node = s.node
	}
	return s.Store.CreateSandbox(ctx, sb)
}

// NodeID is the manager's node ("" without one).
func (m *Manager) NodeID() string { return m.cfg.NodeID }

// mine reports whether the object owned by node is this manager's to
// make, repair, collect or serve.
func (m *Manager) mine(node string) bool {
	return m.cfg.NodeID == "" || node == m.cfg.NodeID
}

// ownPath reports whether path is in this manager's data dir: the repo
// mirrors and pristine checkouts a node made are its own, kept and
// collected by it alone.
func (m *Manager) ownPath(path string) bool {
	if m.cfg.NodeID == "" {
		return true
	}
	rel, err := filepath.Rel(m.cfg.DataDir, path)
	return err == nil && rel != ".." && !strings.HasPrefix(rel, "../")
}

// notMine is the error of an operation on an object another node owns.
func (m *Manager) notMine(ctx context.Context, kind, id, node string) error {
	return fmt.Errorf("%s %s belongs to node %s, not to this one (%s): %w", kind, id, nodeName(ctx, m.st, node), m.cfg.NodeID, errdefs.ErrUnavailable)
}

// nodeName describes a node for an error: its ID, address and state.
func nodeName(ctx context.Context, st store.Store, id string) string {
	nodes, err := st.ListNodes(ctx, clockOf(ctx, st))
	if err != nil {
		return id
	}
	for _, n := range nodes {
		if n.ID == id {
			return fmt.Sprintf("%s (%s, %s)", id, n.Addr, n.State)
		}
	}
	return id + " (not registered)"
}

// clockOf is st's clock, or this machine's when it does not answer.
func clockOf(ctx context.Context, st store.Store) time.Time {
	if t, err := st.Clock(ctx); err == nil {
		return t
	}
	return time.Now().UTC()
}

// Owner is where requests about an object go: the node that owns it.
type Owner struct {
	// Node is the owner's ID; Addr where it listens.
	Node, Addr string
	// State is the owner's state (apitypes.NodeUp, NodeLost, NodeStopped).
	State string
	// Self says that this manager's node owns the object.
	Self bool
}

// WorkspaceOwner returns the owner of workspace id.
func (m *Manager) WorkspaceOwner(ctx context.Context, id string) (Owner, error) {
	// Workspace routes that run commands take a sandbox ID too.
	id, err := m.targetWorkspace(ctx, id)
	if err != nil {
		return Owner{}, err
	}
	w, err := m.st.GetWorkspace(ctx, id)
	if err != nil {
		return Owner{}, err
	}
	return m.ownerOf(ctx, w.Node)
}

// SandboxOwner returns the owner of sandbox id: its workspace's, which
// runs it, or, once its node was lost and the workspace adopted, holds
// what is left of it.
func (m *Manager) SandboxOwner(ctx context.Context, id string) (Owner, error) {
	sb, err := m.st.GetSandbox(ctx, id)
	if err != nil {
		return Owner{}, err
	}
	return m.WorkspaceOwner(ctx, sb.WorkspaceID)
}

// ownSandbox fails unless this node owns sb's workspace.
func (m *Manager) ownSandbox(ctx context.Context, sb store.Sandbox) error {
	if m.cfg.NodeID == "" {
		return nil
	}
	w, err := m.st.GetWorkspace(ctx, sb.WorkspaceID)
	if err != nil {
		return err
	}
	if !m.mine(w.Node) {
		return m.notMine(ctx, "sandbox", sb.ID, w.Node)
	}
	return nil
}

// CandidateOwner returns the owner of candidate id: its workspace's.
func (m *Manager) CandidateOwner(ctx context.Context, id string) (Owner, error) {
	c, err := m.st.GetCandidate(ctx, id)
	if err != nil {
		return Owner{}, err
	}
	return m.WorkspaceOwner(ctx, c.WorkspaceID)
}

// ExecOwner returns the owner of exec id: its workspace's, where it runs
// and its live output is kept.
func (m *Manager) ExecOwner(ctx context.Context, id string) (Owner, error) {
	x, err := m.st.GetExec(ctx, id)
	if err != nil {
		return Owner{}, err
	}
	return m.WorkspaceOwner(ctx, x.WorkspaceID)
}

func (m *Manager) ownerOf(ctx context.Context, node string) (Owner, error) {
	if m.mine(node) {
		return Owner{Node: m.cfg.NodeID, Self: true}, nil
	}
	nodes, err := m.st.ListNodes(ctx, m.clock(ctx))
	if err != nil {
		return Owner{}, err
	}
	for _, n := range nodes {
		if n.ID == node {
			return Owner{Node: n.ID, Addr: n.Addr, State: n.State}, nil
		}
	}
	return Owner{Node: node}, fmt.Errorf("node %s is not registered in the store: %w", node, errdefs.ErrUnavailable)
}

// Place chooses the node for new work: the live node with the fewest
// running sandboxes, then the fewest workspaces, this one on a tie.
func (m *Manager) Place(ctx context.Context) (Owner, error) {
	self := Owner{Node: m.cfg.NodeID, Self: true}
	if m.cfg.NodeID == "" {
		return self, nil
	}
	nodes, err := m.st.ListNodes(ctx, m.clock(ctx))
	if err != nil {
		return Owner{}, err
	}
	var best *store.Node
	better := func(a, b *store.Node) bool {
		if a.Sandboxes != b.Sandboxes {
			return a.Sandboxes < b.Sandboxes
		}
		if a.Workspaces != b.Workspaces {
			return a.Workspaces < b.Workspaces
		}
		return a.ID == m.cfg.NodeID
	}
	for i := range nodes {
		n := &nodes[i]
		if n.State != apitypes.NodeUp || n.Addr == "" && n.ID != m.cfg.NodeID {
			continue
		}
		if best == nil || better(n, best) {
			best = n
		}
	}
	if best == nil || best.ID == m.cfg.NodeID {
		return self, nil
	}
	return Owner{Node: best.ID, Addr: best.Addr, State: best.State}, nil
}

// SolveRunOwner returns the node that runs solve run id (this one for a
// run from before nodes).
func (m *Manager) SolveRunOwner(ctx context.Context, id string) (Owner, error) {
	run, err := m.st.GetSolveRun(ctx, id)
	if err != nil {
		return Owner{}, err
	}
	if run.Node == "" {
		return Owner{Node: m.cfg.NodeID, Self: true}, nil
	}
	return m.ownerOf(ctx, run.Node)
}
