package sandbox

import (
	"context"
	"errors"
)

// Labels of a warm pool's environments (see Attacher). A pooled
// environment carries both from its start to its removal, claimed or not:
// unclaimed, no sandbox record names it, and whoever cleans up unknown
// environments asks the owner's pool (or, at the owner's next start, the
// owner itself removes every one that has no record).
const (
	// LabelPool is "1" on every environment started for a warm pool.
	LabelPool = "agentbox.pool"
	// LabelPoolOwner names the daemon (a hash of its data dir) whose pool
	// started the environment, so that daemons sharing an engine never
	// remove each other's.
	LabelPoolOwner = "agentbox.pool.owner"
)

// ErrNoAttach is wrapped by CreateDetached on a backend (or runtime) that
// cannot attach a workspace to a running environment: its creations always
// start cold.
var ErrNoAttach = errors.New("this backend cannot attach a workspace to a running environment")

// Attacher is implemented by backends that can start an environment before
// its workspace is known and attach the workspace to it later, which is
// what a warm pool needs.
type Attacher interface {
	// CreateDetached starts an environment as Create does, except that
	// req.Files and req.WorkspaceID are empty: until Attach, /workspace is
	// an empty directory that the sandbox user cannot write. The
	// environment carries LabelPool "1" and LabelPoolOwner owner. An error
	// wrapping ErrNoAttach says the backend cannot do this at all.
	CreateDetached(ctx context.Context, req CreateRequest, owner string) (Info, error)
	// Attach makes the host directory files the /workspace of the running
	// environment info, which CreateDetached made: read-write, nosuid,
	// nodev, as Create would have mounted it. It is called at most once
	// per environment; the environment's Remove takes the mount down.
	Attach(ctx context.Context, info Info, files string) error
}
