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
	// now (see NodeState).
	ListNodes(ctx context.Context, now time.Time) ([]Node, error)
}

// NodeState judges a node at now from its stop and heartbeat.
func NodeState(n Node, now time.Time) string {
	switch {
	case n.StoppedAt != nil:
		return apitypes.NodeStopped
	case now.Sub(n.HeartbeatAt) > NodeLease:
		return apitypes.NodeLost
	}
	return apitypes.NodeUp
}
