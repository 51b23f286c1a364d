package apitypes

import "time"

// Node states.
const (
	// NodeUp is a daemon whose heartbeat is current.
	NodeUp = "up"
	// NodeStopped is a daemon that stopped cleanly.
	NodeStopped = "stopped"
	// NodeLost is a daemon whose heartbeat lapsed without a clean stop: it
	// crashed, hangs, or cannot reach the store.
	NodeLost = "lost"
)

// Node is one daemon sharing the store: a data dir on a host.
type Node struct {
	// ID is stable across restarts of the daemon on its data dir ("node_...").
	ID string `json:"id"`
	// Host is the machine's host name; PID the daemon's process.
	Host string `json:"host"`
	PID  int    `json:"pid"`
	// DataDir is the daemon's data dir on its host.
	DataDir string `json:"data_dir"`
	// Addr is where the daemon listens (unix://... or tcp://...).
	Addr string `json:"addr"`
	// Version is the daemon's build.
	Version string `json:"version"`
	// State is one of the Node* constants, judged by the daemon answering
	// from the heartbeat's age.
	State string `json:"state"`
	// StartedAt is when the daemon last started; HeartbeatAt its last
	// heartbeat; StoppedAt its clean stop, if it stopped.
	StartedAt   time.Time  `json:"started_at"`
	HeartbeatAt time.Time  `json:"heartbeat_at"`
	StoppedAt   *time.Time `json:"stopped_at,omitempty"`
	// Lease is how long after its last heartbeat the node counts as lost
	// (three of its heartbeats).
	Lease time.Duration `json:"lease_ns"`
	// Shared says that the node's workspaces sit on storage every node
	// reaches at the same path, so that another node adopts them when this
	// one is lost.
	Shared bool `json:"shared,omitempty"`
	// Workspaces and Sandboxes are what the node owns: its workspaces, and
	// its sandboxes that are creating or running. New workspaces go to the
	// live node with the fewest.
	Workspaces int `json:"workspaces"`
	Sandboxes  int `json:"sandboxes"`
}

// NodeList is the reply of a node listing.
type NodeList struct {
	Nodes []Node `json:"nodes"`
}
