package local

import (
	"context"
	"fmt"

	"github.com/agentbox/agentbox/internal/sandbox"
)

var _ sandbox.OOMCounter = (*Backend)(nil)

// OOMKills reads the oom_kill counter of sandbox ref's memory cgroup.
func (b *Backend) OOMKills(ctx context.Context, ref string) (uint64, error) {
	u, err := b.Usage(ctx, ref)
	if err != nil {
		return 0, fmt.Errorf("counting OOM kills: %w", err)
	}
	return uint64(u.OOMKills), nil
}
