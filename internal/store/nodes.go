package store

import (
	"context"
	"time"

	"github.com/agentbox/agentbox/internal/apitypes"
)

// Node is a daemon sharing the store (the API's record).
type Node = apitypes.Node

// NodeHeartbeat is how often a daemon records that it is alive, and
// NodeLease how long after its last heartbeat it counts as lost: three
// missed beats, so that a slow commit is not a death.
const (
	NodeHeartbeat = 10 * time.Second
	NodeLease     = 3 * NodeHeartbeat
)

// NodeStore keeps the daemons sharing a store.
type NodeStore interface {
	// RegisterNode creates node n's row, or replaces it when the daemon
	// restarts with the same ID, clearing any stop.
	RegisterNode(ctx context.Context, n Node) error
	// HeartbeatNode moves a node's heartbeat to at; ErrNotFound when its
	// row is gone.
	HeartbeatNode(ctx context.Context, id string, at time.Time) error
	// StopNode records a node's clean stop at at.
	StopNode(ctx context.Context, id string, at time.Time) error
	// ListNodes returns every node, ordered by ID, with State judged at
	// now (see NodeState) and its load (Workspaces, Sandboxes) counted.
	ListNodes(ctx context.Context, now time.Time) ([]Node, error)

	// Clock is the time by which nodes beat and judge each other: the
	// database server's, so that nodes on machines whose clocks differ
	// agree on whose lease has lapsed (SQLite: this machine's).
	Clock(ctx context.Context) (time.Time, error)

	// ClaimUnowned gives node every workspace and sandbox no node owns:
	// rows made before nodes, by a daemon alone on its store. It returns
	// how many rows it claimed.
	ClaimUnowned(ctx context.Context, node string) (int, error)
	// MarkNodeLost marks lost, each with a "sandbox.lost" event by actor,
	// the creating and running sandboxes of node if that node is lost at
	// now (no clean stop, and its heartbeat older than its lease), all in
	// one transaction, and returns their IDs. The check and the marking
	// are one guarded update: of two nodes doing it at once, each sandbox
	// is marked by one, and a node that beat meanwhile keeps its own.
	MarkNodeLost(ctx context.Context, node string, now time.Time, actor string) ([]string, error)
	// AdoptWorkspaces gives to node to at most limit (0: all) of the
	// ready workspaces of the copy driver without a disk quota (plain
	// directories) that node from owns, if from is lost at now and
	// registered as shared, and returns them; a "workspace.adopted" event
	// records each. Two adopters never take the same workspace: the
	// update is guarded by its owner. The limit lets each survivor take
	// its share.
	AdoptWorkspaces(ctx context.Context, from, to string, now time.Time, limit int) ([]Workspace, error)
	// ClusterValue returns the cluster-wide value named name, storing
	// value first when there is none: the first node to ask sets it for
	// all.
	ClusterValue(ctx context.Context, name, value string) (string, error)
}

// LeaseOf is a node's lease: its own, or NodeLease for a node that
// recorded none.
func LeaseOf(n Node) time.Duration {
	if n.Lease > 0 {
		return n.Lease
	}
	return NodeLease
}

// NodeState judges a node at now from its stop and heartbeat.
func NodeState(n Node, now time.Time) string {
	switch {
	case n.StoppedAt != nil:
		return apitypes.NodeStopped
	case now.Sub(n.HeartbeatAt) > LeaseOf(n):
		return apitypes.NodeLost
	}
	return apitypes.NodeUp
}
