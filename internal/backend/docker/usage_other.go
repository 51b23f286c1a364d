//go:build !linux

package docker

import (
	"context"

	"github.com/agentbox/agentbox/internal/errdefs"
	"github.com/agentbox/agentbox/internal/sandbox"
)

// ReadUsage needs the host's cgroups: Linux only.
func (b *Backend) ReadUsage(ctx context.Context, ref string) (sandbox.Usage, error) {
	return sandbox.Usage{}, errdefs.Invalid("the %s backend reads usage only on Linux", b.name)
}
