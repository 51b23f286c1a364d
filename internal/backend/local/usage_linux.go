package local

import (
	"context"

	"github.com/agentbox/agentbox/internal/sandbox"
)

var _ sandbox.UsageReader = (*Backend)(nil)

// ReadUsage reads the CPU time and memory high-water mark of sandbox
// ref's cgroups.
func (b *Backend) ReadUsage(ctx context.Context, ref string) (sandbox.Usage, error) {
	u, err := b.Usage(ctx, ref)
	if err != nil {
		return sandbox.Usage{}, err
	}
	return sandbox.Usage{CPU: u.CPU, MemoryPeakBytes: max(u.MemoryPeakBytes, 0)}, nil
}
