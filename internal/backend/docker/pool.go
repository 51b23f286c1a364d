package docker

import (
	"context"
	"fmt"

	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/api/types/mount"

	"github.com/agentbox/agentbox/internal/errdefs"
	"github.com/agentbox/agentbox/internal/sandbox"
)

// Warm pool. A pooled container is started before its workspace is known,
// so Docker cannot bind the workspace into it. Instead its /workspace is a
// bind, with rslave propagation, of an empty per-sandbox host directory
// (the pool point, under MountDir/<id>) that is itself a mount in a peer
// group of its own. Attach makes a nosuid,nodev bind of the workspace
// privately, binds that onto the pool point, and the kernel propagates the
// new mount into the running container's /workspace, where it covers the
// empty directory. The mount keeps its flags on the way, so the workspace
// is nosuid,nodev inside as SECURITY.md B14 requires. Remove takes the
// pool point and everything on it down with the other binds of the
// sandbox.
//
// The gvisor backend cannot do this, as measured with runsc 2022-12: its
// gofer serves a bind from the directory it opened at the start, and a
// mount made on the host at that directory later never shows inside (the
// sandbox keeps seeing the empty directory). Its pools stay empty and its
// creations start cold (ErrNoAttach).

var _ sandbox.Attacher = (*Backend)(nil)

// poolPointName is the pool point's name in the sandbox's bind directory.
const poolPointName = "pool"

// CreateDetached starts a container for a warm pool (see sandbox.Attacher).
func (b *Backend) CreateDetached(ctx context.Context, req sandbox.CreateRequest, owner string) (sandbox.Info, error) {
	if err := b.canAttach(); err != nil {
		return sandbox.Info{}, fmt.Errorf("creating pooled sandbox %s: %w", req.ID, err)
	}
	if owner == "" {
		return sandbox.Info{}, errdefs.Invalid("creating pooled sandbox %s: no pool owner", req.ID)
	}
	return b.create(ctx, req, owner)
}

// canAttach says whether this backend's runtime sees mounts propagated
// into a running container.
func (b *Backend) canAttach() error {
	if b.runtime == RuntimeRunsc {
		return fmt.Errorf("%w: the %s backend (runsc) does not see a mount made on the host after its start", sandbox.ErrNoAttach, b.name)
	}
	return nil
}

// Attach covers the empty /workspace of a pooled container with files.
func (b *Backend) Attach(ctx context.Context, info sandbox.Info, files string) error {
	if err := b.canAttach(); err != nil {
		return fmt.Errorf("attaching workspace %s to sandbox %s: %w", files, info.ID, err)
	}
	if !validID.MatchString(info.ID) {
		return errdefs.Invalid("attaching workspace %s: sandbox id %q", files, info.ID)
	}
	if _, dup := b.attached.LoadOrStore(info.ID, true); dup {
		return fmt.Errorf("attaching workspace %s to sandbox %s: it has a workspace attached already: %w", files, info.ID, errdefs.ErrConflict)
	}
	if err := b.attach(info.ID, files); err != nil {
		// Perhaps half-attached: the sandbox is only fit for removal.
		return fmt.Errorf("attaching workspace %s to sandbox %s: %w", files, info.ID, err)
	}
	return nil
}

// detach turns a sandbox's container configuration into a pooled one: no
// workspace label, the pool labels, and the workspace bind (of the pool
// point) with slave propagation, so that the mount Attach makes on the
// host reaches the container.
func detach(cfg *container.Config, host *container.HostConfig, owner string) {
	delete(cfg.Labels, sandbox.LabelWorkspace)
	cfg.Labels[sandbox.LabelPool] = "1"
	cfg.Labels[sandbox.LabelPoolOwner] = owner
	for i := range host.Mounts {
		if host.Mounts[i].Target == sandbox.WorkspaceDir {
			host.Mounts[i].BindOptions = &mount.BindOptions{Propagation: mount.PropagationRSlave}
		}
	}
}
