//go:build !linux

package docker

import (
	"context"

	"github.com/agentbox/agentbox/internal/errdefs"
)

// OOMKills needs the host's cgroups: Linux only.
func (b *Backend) OOMKills(ctx context.Context, ref string) (uint64, error) {
	return 0, errdefs.Invalid("the %s backend counts OOM kills only on Linux", b.name)
}
