//go:build !linux

package docker

import (
	"context"

	"github.com/agentbox/agentbox/internal/errdefs"
)

// workspaceSource cannot check or make a nosuid,nodev bind off Linux, so
// the docker backend refuses to create sandboxes there.
func (b *Backend) workspaceSource(id, files string) (string, func() error, error) {
	return "", nil, errdefs.Invalid("the %s backend creates sandboxes only on Linux", b.name)
}

func (b *Backend) releaseBind(id string) error { return nil }

func (b *Backend) sweepBinds(ctx context.Context) error { return nil }

func (b *Backend) maskFile() (string, error) {
	return "", errdefs.Invalid("the %s backend creates sandboxes only on Linux", b.name)
}

func (b *Backend) etcDir(id, hostname string) (string, func() error, error) {
	return "", nil, errdefs.Invalid("the %s backend creates sandboxes only on Linux", b.name)
}
